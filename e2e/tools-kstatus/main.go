// Command kstatus computes each object's status the way GitOps tools do (Flux, kpt,
// Argo CD's health checks through cli-utils): sigs.k8s.io/cli-utils' kstatus, the
// library itself, not a re-implementation. It reads `kubectl get -o json` output on
// stdin (one object or a List) and prints one JSON line per object:
//
//	{"kind":"SaintBot","name":"my-bot","status":"Failed","message":"..."}
//
// e2e/tests/kstatus.rs runs it on SaintBots, Contacts and Roles.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type line struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	input, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("failed to read stdin: %w", err)
	}
	var object unstructured.Unstructured
	if err := object.UnmarshalJSON(input); err != nil {
		return fmt.Errorf("failed to parse an object or List from stdin: %w", err)
	}
	objects := []unstructured.Unstructured{object}
	if object.IsList() {
		list, err := object.ToList()
		if err != nil {
			return fmt.Errorf("failed to read the List: %w", err)
		}
		objects = list.Items
	}
	encoder := json.NewEncoder(out)
	for i := range objects {
		result, err := status.Compute(&objects[i])
		if err != nil {
			return fmt.Errorf("failed to compute the status of %s %q: %w", objects[i].GetKind(), objects[i].GetName(), err)
		}
		if err := encoder.Encode(line{
			Kind:    objects[i].GetKind(),
			Name:    objects[i].GetName(),
			Status:  result.Status.String(),
			Message: result.Message,
		}); err != nil {
			return err
		}
	}
	return nil
}
