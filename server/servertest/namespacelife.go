package servertest

import (
	"fmt"
)

// Conditions maps each status condition's type to "status: message".
func Conditions(r Response) map[string]string {
	out := map[string]string{}
	st, _ := r.Object()["status"].(map[string]any)
	cs, _ := st["conditions"].([]any)
	for _, c := range cs {
		m, _ := c.(map[string]any)
		out[fmt.Sprint(m["type"])] = fmt.Sprintf("%v: %v", m["status"], m["message"])
	}
	return out
}
