package kubernetes_test

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// manifestKinds are the kinds deploy/kubernetes/airlock.yaml holds, and
// whether they live in a namespace.
var manifestKinds = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"Namespace":          {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false},
	"RuntimeClass":       {schema.GroupVersionResource{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"}, false},
	"ServiceAccount":     {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"Role":               {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	"RoleBinding":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	"ClusterRole":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	"ClusterRoleBinding": {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
	"Deployment":         {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
	"Service":            {schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
}

// TestDeployManifests has the test cluster's API server validate every
// object of deploy/kubernetes/airlock.yaml, as a server-side dry run of
// its creation (nothing is stored). The namespaced ones go to the test's
// namespace, since the manifests' own is not there; an object whose name
// is taken (the gvisor RuntimeClass) has passed validation, which comes
// first.
func TestDeployManifests(t *testing.T) {
	newBackend(t, options()) // skips without a cluster
	tc := testClient()
	dc, err := dynamic.NewForConfigAndClient(tc.cfg, tc.hc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../../deploy/kubernetes/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	seen := map[string]bool{}
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj.Object == nil {
			continue
		}
		kind, name := obj.GetKind(), obj.GetName()
		k, ok := manifestKinds[kind]
		if !ok {
			t.Fatalf("%s %s: a kind this test does not know", kind, name)
		}
		var ri dynamic.ResourceInterface = dc.Resource(k.gvr)
		if k.namespaced {
			obj.SetNamespace(tc.ns)
			ri = dc.Resource(k.gvr).Namespace(tc.ns)
		}
		_, err := ri.Create(context.Background(), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		switch {
		case err == nil:
			t.Logf("%s %s: valid", kind, name)
		case apierrors.IsAlreadyExists(err):
			t.Logf("%s %s: valid (the name is taken here)", kind, name)
		default:
			t.Errorf("%s %s: %v", kind, name, err)
		}
		seen[kind] = true
	}
	for kind := range manifestKinds {
		if !seen[kind] {
			t.Errorf("the manifests hold no %s", kind)
		}
	}
}
