package watchcache

// Adopt takes o in under b, as a cache does when o enters it.
func Adopt(o *Object, b *Budget) { o.adopt(b) }

// Retire marks o as gone from its cache, as a cache does when o leaves it.
func Retire(o *Object) { o.retire() }
