// Package testobj builds the objects objwatch's benchmarks and tests share,
// so that every measurement uses the same ones.
package testobj

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConfigMap returns ConfigMap i of namespace, about 1 KiB: labels app,
// shard (i mod 16) and index (i), and 8 data values of 100 alphanumeric
// characters drawn from rnd (which random text makes the compressible part
// of the object its metadata alone).
func ConfigMap(namespace string, i int, rnd *rand.Rand) *corev1.ConfigMap {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	data := make(map[string]string, 8)
	for k := range 8 {
		v := make([]byte, 100)
		for j := range v {
			v[j] = letters[rnd.IntN(len(letters))]
		}
		data[fmt.Sprint("key-", k)] = string(v)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("cm-%05d", i),
			Labels: map[string]string{"app": "bench", "shard": fmt.Sprint(i % 16), "index": fmt.Sprint(i)}},
		Data: data,
	}
}
