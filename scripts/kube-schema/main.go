// Command kube-schema decodes Kubernetes objects strictly into the API's Go
// types (k8s.io/api, the types an API server decodes into), as an API
// server with fieldValidation=Strict does: a field the type does not have,
// a field twice, or a value of the wrong type (a string for an integer) is
// an error. It does not run the API server's validation (required fields,
// allowed values, rules between fields): only an API server does that.
//
//	kubectl kustomize deploy/kubernetes/base | go run ./scripts/kube-schema
//
// It prints one line per object and exits 1 if any object failed.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	n, err := check(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-schema:", err)
		os.Exit(1)
	}
	fmt.Printf("kube-schema: %d objects decoded strictly\n", n)
}

func check(in io.Reader, out io.Writer) (int, error) {
	decode := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	n, failed := 0, 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := decode(doc, nil, nil)
		if err != nil {
			failed++
			fmt.Fprintf(out, "FAILED: %v\n", err)
			continue
		}
		n++
		fmt.Fprintf(out, "ok: %s %s\n", gvk, name(obj))
	}
	if failed > 0 {
		return n, fmt.Errorf("%d of %d objects failed", failed, n+failed)
	}
	return n, nil
}

func name(obj any) string {
	if o, ok := obj.(interface{ GetName() string }); ok {
		return o.GetName()
	}
	return "?"
}
