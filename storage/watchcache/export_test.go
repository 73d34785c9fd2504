package watchcache

// Retire marks o as gone from its cache, as a cache does when o leaves it.
func Retire(o *Object) { o.retire() }
