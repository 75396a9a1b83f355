package experiment

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Diff names the settings in which two configurations (config.yaml as
// Config.YAML writes it) differ, one "key: old -> new" each in key order,
// so that an error about another run's directory can say which setting
// changed. A key one of them lacks reads "(unset)"; a structured value
// (model_spec, schema) that changed reads "(changed)".
func Diff(old, new []byte) ([]string, error) {
	var a, b map[string]any
	if err := yaml.Unmarshal(old, &a); err != nil {
		return nil, fmt.Errorf("the old configuration: %w", err)
	}
	if err := yaml.Unmarshal(new, &b); err != nil {
		return nil, fmt.Errorf("the new configuration: %w", err)
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		va, vb := show(a, k), show(b, k)
		switch {
		case va == vb:
		case strings.Contains(va+vb, "\n"):
			out = append(out, k+": (changed)")
		default:
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, va, vb))
		}
	}
	return out, nil
}

// show is the value of key k in m as one line of YAML, or "(unset)".
func show(m map[string]any, k string) string {
	v, ok := m[k]
	if !ok {
		return "(unset)"
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
