package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifestDir is deploy/kubernetes.
const manifestDir = ".."

// operatorSecrets are Secrets the manifests use and the operator makes
// (secrets.yaml says how): they hold keys of the operator's own CA.
var operatorSecrets = map[string][]string{"craftdns-raft-tls": {"ca.crt", "tls.crt", "tls.key"}}

// manifests is every object of deploy/kubernetes, by kind and name.
type manifests struct {
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	accounts     map[string]*corev1.ServiceAccount
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	budgets      map[string]*policyv1.PodDisruptionBudget
	roles        map[string]*rbacv1.Role
	bindings     map[string]*rbacv1.RoleBinding
}

// decodeDoc decodes one YAML document strictly into the type its
// apiVersion and kind name: a field the type does not have is an error
// naming it.
func (m *manifests) decodeDoc(file string, doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	strict := func(v any) error {
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return fmt.Errorf("%s: %s %s: %w", file, head.Kind, head.Metadata.Name, err)
		}
		return nil
	}
	add := func(dst any, v any) error {
		if err := strict(v); err != nil {
			return err
		}
		switch d := dst.(type) {
		case map[string]*corev1.Service:
			d[head.Metadata.Name] = v.(*corev1.Service)
		case map[string]*corev1.ConfigMap:
			d[head.Metadata.Name] = v.(*corev1.ConfigMap)
		case map[string]*corev1.Secret:
			d[head.Metadata.Name] = v.(*corev1.Secret)
		case map[string]*corev1.ServiceAccount:
			d[head.Metadata.Name] = v.(*corev1.ServiceAccount)
		case map[string]*appsv1.StatefulSet:
			d[head.Metadata.Name] = v.(*appsv1.StatefulSet)
		case map[string]*appsv1.Deployment:
			d[head.Metadata.Name] = v.(*appsv1.Deployment)
		case map[string]*policyv1.PodDisruptionBudget:
			d[head.Metadata.Name] = v.(*policyv1.PodDisruptionBudget)
		case map[string]*rbacv1.Role:
			d[head.Metadata.Name] = v.(*rbacv1.Role)
		case map[string]*rbacv1.RoleBinding:
			d[head.Metadata.Name] = v.(*rbacv1.RoleBinding)
		}
		return nil
	}
	if head.Metadata.Name == "" {
		return fmt.Errorf("%s: a %s without a name", file, head.Kind)
	}
	switch head.APIVersion + " " + head.Kind {
	case "v1 Service":
		return add(m.services, &corev1.Service{})
	case "v1 ConfigMap":
		return add(m.configMaps, &corev1.ConfigMap{})
	case "v1 Secret":
		return add(m.secrets, &corev1.Secret{})
	case "v1 ServiceAccount":
		return add(m.accounts, &corev1.ServiceAccount{})
	case "apps/v1 StatefulSet":
		return add(m.statefulSets, &appsv1.StatefulSet{})
	case "apps/v1 Deployment":
		return add(m.deployments, &appsv1.Deployment{})
	case "policy/v1 PodDisruptionBudget":
		return add(m.budgets, &policyv1.PodDisruptionBudget{})
	case "rbac.authorization.k8s.io/v1 Role":
		return add(m.roles, &rbacv1.Role{})
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return add(m.bindings, &rbacv1.RoleBinding{})
	}
	return fmt.Errorf("%s: %s: apiVersion %q kind %q is not one these manifests use", file, head.Metadata.Name, head.APIVersion, head.Kind)
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode reads the documents of the given files (name → text).
func decode(files map[string][]byte) (*manifests, error) {
	m := &manifests{services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, accounts: map[string]*corev1.ServiceAccount{},
		statefulSets: map[string]*appsv1.StatefulSet{}, deployments: map[string]*appsv1.Deployment{},
		budgets: map[string]*policyv1.PodDisruptionBudget{}, roles: map[string]*rbacv1.Role{}, bindings: map[string]*rbacv1.RoleBinding{}}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, doc := range docSep.Split(string(files[n]), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			if err := m.decodeDoc(n, []byte(doc)); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func readManifests(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = b
	}
	return files
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m, err := decode(readManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestManifestsStrict: every document of deploy/kubernetes decodes
// strictly into its Kubernetes API type, and the set is what the README
// promises: a StatefulSet per shard with a PVC per member and a headless
// Service that publishes members before they are ready, a Deployment of
// routers, Services, probes on /ready and /health, PodDisruptionBudgets,
// the Corefiles in ConfigMaps and the TSIG key, API token and Raft TLS
// files in Secrets.
func TestManifestsStrict(t *testing.T) {
	m := loadManifests(t)
	if len(m.statefulSets) != 2 || len(m.deployments) != 1 {
		t.Fatalf("expected two shards' StatefulSets and the routers' Deployment, got %d and %d", len(m.statefulSets), len(m.deployments))
	}
	for name, sts := range m.statefulSets {
		t.Run(name, func(t *testing.T) {
			svc := m.services[sts.Spec.ServiceName]
			switch {
			case svc == nil:
				t.Fatalf("serviceName %q: no such Service", sts.Spec.ServiceName)
			case svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses:
				t.Errorf("Service %s: expected headless (clusterIP None) with publishNotReadyAddresses", svc.Name)
			}
			if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
				t.Errorf("expected 3 replicas (member ids 1-3 of the Corefile's peer lines)")
			}
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("expected podManagementPolicy Parallel: a member is ready only once a majority runs")
			}
			if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
				t.Errorf("expected one PersistentVolumeClaim template, data")
			}
			checkPod(t, m, "StatefulSet "+name, sts.Spec.Selector.MatchLabels, sts.Spec.Template, []string{"data"})
			checkSelects(t, m, svc, sts.Spec.Template.Labels)
			checkBudget(t, m, sts.Spec.Template.Labels)
			if sts.Spec.Template.Spec.ServiceAccountName == "" || m.accounts[sts.Spec.Template.Spec.ServiceAccountName] == nil {
				t.Errorf("service account %q: not defined", sts.Spec.Template.Spec.ServiceAccountName)
			}
			// The member's account may read its StatefulSet (scale-downs).
			readable := false
			for _, b := range m.bindings {
				for _, s := range b.Subjects {
					if s.Kind != "ServiceAccount" || s.Name != sts.Spec.Template.Spec.ServiceAccountName || b.RoleRef.Kind != "Role" || m.roles[b.RoleRef.Name] == nil {
						continue
					}
					for _, r := range m.roles[b.RoleRef.Name].Rules {
						if slices.Contains(r.APIGroups, "apps") && slices.Contains(r.Resources, "statefulsets") && slices.Contains(r.Verbs, "get") &&
							(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
							readable = true
						}
					}
				}
			}
			if !readable {
				t.Errorf("the members' service account may not get StatefulSet %s", name)
			}
		})
	}
	for name, d := range m.deployments {
		t.Run(name, func(t *testing.T) {
			checkPod(t, m, "Deployment "+name, d.Spec.Selector.MatchLabels, d.Spec.Template, nil)
			checkBudget(t, m, d.Spec.Template.Labels)
			dnsService := false
			for _, svc := range m.services {
				if svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
					checkSelects(t, m, svc, d.Spec.Template.Labels)
					for _, p := range svc.Spec.Ports {
						dnsService = dnsService || p.Port == 53
					}
				}
			}
			if !dnsService {
				t.Errorf("no Service offers the routers' DNS on port 53")
			}
		})
	}
}

// checkPod checks a pod template: its labels match the selector, its
// probes are /ready and /health on ports it declares, and every volume,
// environment secret and mount refers to what exists.
func checkPod(t *testing.T, m *manifests, what string, selector map[string]string, tpl corev1.PodTemplateSpec, claims []string) {
	t.Helper()
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(tpl.Labels)) {
		t.Errorf("%s: the selector %v does not match the pod's labels %v", what, selector, tpl.Labels)
	}
	volumes := map[string]bool{}
	for _, c := range claims {
		volumes[c] = true
	}
	for _, v := range tpl.Spec.Volumes {
		volumes[v.Name] = true
		switch {
		case v.ConfigMap != nil:
			if m.configMaps[v.ConfigMap.Name] == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", what, v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			if m.secrets[v.Secret.SecretName] == nil && operatorSecrets[v.Secret.SecretName] == nil {
				t.Errorf("%s: volume %s: no Secret %s", what, v.Name, v.Secret.SecretName)
			}
		default:
			t.Errorf("%s: volume %s: not a ConfigMap or Secret", what, v.Name)
		}
	}
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("%s: expected one container", what)
	}
	c := tpl.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/ready"}, {"liveness", c.LivenessProbe, "/health"}} {
		switch {
		case pr.probe == nil || pr.probe.HTTPGet == nil:
			t.Errorf("%s: no HTTP %s probe", what, pr.name)
		case pr.probe.HTTPGet.Path != pr.path:
			t.Errorf("%s: %s probe on %s, expected %s", what, pr.name, pr.probe.HTTPGet.Path, pr.path)
		case ports[pr.probe.HTTPGet.Port.String()] == 0:
			t.Errorf("%s: %s probe on port %s, which the container does not declare", what, pr.name, pr.probe.HTTPGet.Port.String())
		}
	}
	for _, vm := range c.VolumeMounts {
		if !volumes[vm.Name] {
			t.Errorf("%s: mount %s: no such volume", what, vm.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			s := m.secrets[ref.Name]
			if s == nil {
				t.Errorf("%s: env %s: no Secret %s", what, e.Name, ref.Name)
			} else if _, ok := s.StringData[ref.Key]; !ok {
				if _, ok := s.Data[ref.Key]; !ok {
					t.Errorf("%s: env %s: Secret %s has no key %s", what, e.Name, ref.Name, ref.Key)
				}
			}
		}
	}
	if sc := tpl.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("%s: expected to run as the image's user 65532, not root", what)
	}
}

// checkSelects checks that svc selects pods with podLabels and that each
// of its ports is one the pods declare (by name or number).
func checkSelects(t *testing.T, m *manifests, svc *corev1.Service, podLabels map[string]string) {
	t.Helper()
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
		t.Errorf("Service %s does not select the pods (%v vs %v)", svc.Name, svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Errorf("Service %s has no ports", svc.Name)
	}
}

// checkBudget checks that one PodDisruptionBudget covers pods with podLabels.
func checkBudget(t *testing.T, m *manifests, podLabels map[string]string) {
	t.Helper()
	n := 0
	for _, b := range m.budgets {
		if b.Spec.Selector != nil && labels.SelectorFromSet(b.Spec.Selector.MatchLabels).Matches(labels.Set(podLabels)) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("expected one PodDisruptionBudget for pods %v, got %d", podLabels, n)
	}
}

// TestManifestsUnknownField: a manifest with a field its type does not
// have is refused, the field named, wherever it is.
func TestManifestsUnknownField(t *testing.T) {
	files := readManifests(t)
	for _, tc := range []struct {
		file, after, insert, field string
	}{
		{"shard-a.yaml", "  podManagementPolicy: Parallel\n", "  replicaz: 4\n", "replicaz"},
		{"router.yaml", "          imagePullPolicy: IfNotPresent\n", "          imagePullPolicyy: Always\n", "imagePullPolicyy"},
		{"configmaps.yaml", "  name: craftdns-router\n", "  nmespace: dns\n", "nmespace"},
		{"rbac.yaml", "    verbs: [\"get\"]\n", "    verb: [\"list\"]\n", "verb"},
	} {
		bad := map[string][]byte{}
		for k, v := range files {
			bad[k] = v
		}
		if !bytes.Contains(files[tc.file], []byte(tc.after)) {
			t.Fatalf("%s: %q not found", tc.file, tc.after)
		}
		bad[tc.file] = bytes.Replace(files[tc.file], []byte(tc.after), []byte(tc.after+tc.insert), 1)
		_, err := decode(bad)
		if err == nil || !strings.Contains(err.Error(), `unknown field "`) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s with %q: expected an error naming the unknown field, got %v", tc.file, strings.TrimSpace(tc.insert), err)
		}
	}
	if _, err := decode(map[string][]byte{"x.yaml": []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n")}); err == nil {
		t.Error("expected a kind the manifests do not use to be refused")
	}
}
