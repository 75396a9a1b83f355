// Command kube-schema decodes Kubernetes objects strictly into the API's Go
// types (k8s.io/api, the types an API server decodes into), as an API
// server with fieldValidation=Strict does: a field the type does not have,
// a field twice, or a value of the wrong type (a string for an integer) is
// an error. Each workload's pod template is then checked against the
// "restricted" Pod Security level by the library the API server's Pod
// Security admission runs (k8s.io/pod-security-admission, its latest
// version of the level). It does not run the API server's validation
// (required fields, allowed values, rules between fields): only an API
// server does that.
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

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	psa "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

func main() {
	n, pods, err := check(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-schema:", err)
		os.Exit(1)
	}
	fmt.Printf("kube-schema: %d objects decoded strictly, %d pod templates of the restricted level\n", n, pods)
}

func check(in io.Reader, out io.Writer) (n, pods int, err error) {
	decode := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode
	pss, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return 0, 0, err
	}
	restricted := psa.LevelVersion{Level: psa.LevelRestricted, Version: psa.LatestVersion()}
	r := utilyaml.NewYAMLReader(bufio.NewReader(in))
	failed := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, pods, err
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
		note := ""
		if meta, spec := podTemplate(obj); spec != nil {
			r := policy.AggregateCheckResults(pss.EvaluatePod(restricted, meta, spec))
			if !r.Allowed {
				failed++
				fmt.Fprintf(out, "FAILED: %s %s: Pod Security %s: %s\n", gvk, name(obj), restricted, r.ForbiddenDetail())
				continue
			}
			note = fmt.Sprintf(" (its pods: Pod Security %s)", restricted)
			pods++
		}
		n++
		fmt.Fprintf(out, "ok: %s %s%s\n", gvk, name(obj), note)
	}
	if failed > 0 {
		return n, pods, fmt.Errorf("%d of %d objects failed", failed, n+failed)
	}
	return n, pods, nil
}

// podTemplate is a workload's pod template, or nil.
func podTemplate(obj any) (*metav1.ObjectMeta, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec
	}
	return nil, nil
}

func name(obj any) string {
	if o, ok := obj.(interface{ GetName() string }); ok {
		return o.GetName()
	}
	return "?"
}
