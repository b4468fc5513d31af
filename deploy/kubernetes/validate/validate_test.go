package validate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/wasmhost/wasmhost/config"
)

// root is deploy/kubernetes.
const root = ".."

// kustomizations are the directories `kubectl apply -k` takes.
var kustomizations = []string{"base", "overlays/example"}

// Bounds of the daemon's stop after --drain-timeout (daemon/doc.go,
// "Stopping"): up to session.AnswerGrace (2 s) for the answers of calls
// cut short and 2 s for those calls to return, then the closes, which the
// margin covers.
const (
	afterDrain  = 4 * time.Second
	closeMargin = 5 * time.Second
)

// decoder decodes strictly: unknown and duplicate fields are errors.
func decoder(t *testing.T) runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// A build is one kustomization's resources, decoded.
type build struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        []*policyv1.PodDisruptionBudget
	ingresses   []*networkingv1.Ingress
}

// kustomize builds dir with the kustomize library (no network) and
// decodes every resource it makes strictly.
func kustomize(t *testing.T, dir string) *build {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("%s: kustomize build: %v", dir, err)
	}
	dec := decoder(t)
	b := &build{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, r.CurId(), err)
		}
		obj, gvk, err := dec.Decode(y, nil, nil)
		if err != nil {
			t.Errorf("%s: %s: strict decode: %v", dir, r.CurId(), err)
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			b.deployments = append(b.deployments, o)
		case *corev1.Service:
			b.services = append(b.services, o)
		case *corev1.ConfigMap:
			b.configMaps[o.Name] = o
		case *corev1.Secret:
			b.secrets[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			b.pdbs = append(b.pdbs, o)
		case *networkingv1.Ingress:
			b.ingresses = append(b.ingresses, o)
		default:
			t.Errorf("%s: %s: a kind this check does not know: %v", dir, r.CurId(), gvk)
		}
	}
	return b
}

// TestManifestsDecodeStrictly: every YAML file under deploy/kubernetes
// that is a Kubernetes object (not a kustomization) decodes strictly on
// its own too, so that a file no kustomization lists is checked as well.
func TestManifestsDecodeStrictly(t *testing.T) {
	dec := decoder(t)
	n := 0
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, doc := range bytes.Split(data, []byte("\n---")) {
			if strings.HasSuffix(p, "kustomization.yaml") || len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			n++
			if _, _, err := dec.Decode(doc, nil, nil); err != nil {
				t.Errorf("%s (document %d): %v", p, i+1, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Errorf("only %d manifests found under %s", n, root)
	}
}

// TestKustomizations: each kustomization builds, and what it makes holds
// together.
func TestKustomizations(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			b := kustomize(t, dir)
			if len(b.deployments) != 1 || len(b.services) != 1 || len(b.pdbs) != 1 {
				t.Fatalf("want one Deployment, Service and PodDisruptionBudget; got %d, %d, %d", len(b.deployments), len(b.services), len(b.pdbs))
			}
			checkDeployment(t, b)
			if dir == "overlays/example" {
				checkComplete(t, b)
			}
		})
	}
}

// args returns the values of flag --name in c's args.
func args(c corev1.Container, name string) []string {
	var out []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func checkDeployment(t *testing.T, b *build) {
	d := b.deployments[0]
	pod := d.Spec.Template
	sel, err := metav1Selector(d)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Deployment's selector %v does not match its pods' labels %v", sel, pod.Labels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v: want at least 2", d.Spec.Replicas)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	probe := func(what string, p *corev1.Probe, path string) {
		switch {
		case p == nil || p.HTTPGet == nil:
			t.Errorf("%s: want an HTTP GET of %s", what, path)
		case p.HTTPGet.Path != path:
			t.Errorf("%s: path %q, want %q", what, p.HTTPGet.Path, path)
		case ports[p.HTTPGet.Port.String()] == 0 && p.HTTPGet.Port.IntValue() == 0:
			t.Errorf("%s: port %q is not a container port", what, p.HTTPGet.Port.String())
		}
	}
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	probe("livenessProbe", c.LivenessProbe, "/healthz")

	// The grace period covers the preStop delay, the drain and the close.
	var pre time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("want a preStop sleep: the replica must stay serving while endpoints and ingresses take it out")
	} else {
		pre = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	drain := 10 * time.Second // daemon.DefaultDrainTimeout
	if v := args(c, "drain-timeout"); len(v) > 0 {
		if drain, err = time.ParseDuration(v[len(v)-1]); err != nil {
			t.Errorf("--drain-timeout=%s: %v", v[len(v)-1], err)
		}
	}
	if pod.Spec.TerminationGracePeriodSeconds == nil {
		t.Error("want terminationGracePeriodSeconds")
	} else if grace, need := time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second, pre+drain+afterDrain+closeMargin; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain %v + %v + %v: the kubelet would kill a replica still draining", grace, pre, drain, afterDrain, closeMargin)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("want cpu and memory requests (docs/operations.md sizes them)")
	}
	if l := c.Resources.Limits.Memory(); !l.IsZero() && l.Cmp(*c.Resources.Requests.Memory()) < 0 {
		t.Error("memory limit below the request")
	}
	hasEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	})
	if !hasEnv && len(args(c, "replica")) == 0 {
		t.Error("want POD_NAME from metadata.name (the replica's name in the metrics) or --replica")
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("volume mount %s uses subPath: the kubelet never updates it, so a ConfigMap or Secret change would not reach the replica", m.Name)
		}
	}

	svc := b.services[0]
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Service's selector %v does not match the pods' labels %v", svc.Spec.Selector, pod.Labels)
	}
	for _, p := range svc.Spec.Ports {
		if ports[p.TargetPort.String()] == 0 && p.TargetPort.IntValue() == 0 {
			t.Errorf("Service port %s: targetPort %q is not a container port", p.Name, p.TargetPort.String())
		}
	}
	pdb := b.pdbs[0]
	ps, err := metav1LabelSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !ps.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the PodDisruptionBudget's selector %v does not match the pods", ps)
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget bounds nothing")
	}
}

// checkComplete checks a kustomization meant to be applied as it is: the
// volumes exist, the config loads with the Secret's tokens and pins the
// policy in the ConfigMap, and the Ingress routes to the Service with the
// tested affinity.
func checkComplete(t *testing.T, b *build) {
	d := b.deployments[0]
	c := d.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{} // volume → mount path
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	files := map[string][]byte{} // path in the container → contents
	for _, v := range d.Spec.Template.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cm := b.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Errorf("volume %s: no ConfigMap %q", v.Name, v.ConfigMap.Name)
				continue
			}
			for k, s := range cm.Data {
				files[path.Join(mounts[v.Name], k)] = []byte(s)
			}
			for k, data := range cm.BinaryData {
				files[path.Join(mounts[v.Name], k)] = data
			}
			if n := cmSize(cm); n > 1<<20 {
				t.Errorf("ConfigMap %s: %d bytes, over Kubernetes' 1 MiB", cm.Name, n)
			}
		case v.Secret != nil:
			s := b.secrets[v.Secret.SecretName]
			if s == nil {
				t.Errorf("volume %s: no Secret %q", v.Name, v.Secret.SecretName)
				continue
			}
			for k, data := range s.Data {
				files[path.Join(mounts[v.Name], k)] = data
			}
		}
	}
	cfgPaths := args(c, "config")
	if len(cfgPaths) != 1 {
		t.Fatalf("want one --config=FILE, got %v", cfgPaths)
	}
	data, ok := files[cfgPaths[0]]
	if !ok {
		t.Fatalf("--config=%s is in no mounted ConfigMap", cfgPaths[0])
	}
	read := func(p string) ([]byte, error) {
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%s: in no mounted ConfigMap or Secret", p)
	}
	cfg, warnings, err := config.Parse(cfgPaths[0], data, func(string) (string, bool) { return "", false }, read)
	if err != nil {
		t.Fatalf("the config does not load: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("config warning: %s", w)
	}
	if cfg.Policy.Path != "" {
		pol, err := read(cfg.Policy.Path)
		if err != nil {
			t.Errorf("policy: %v", err)
		} else if sum := sha256.Sum256(pol); cfg.Policy.SHA256 != "" && hex.EncodeToString(sum[:]) != cfg.Policy.SHA256 {
			t.Errorf("policy %s: sha256 %x, the config pins %s", cfg.Policy.Path, sum, cfg.Policy.SHA256)
		}
		// The example's plugin is the committed AssemblyScript build of
		// the default policy; it must not drift from it.
		want, err := os.ReadFile(filepath.Join(root, "../../testplugins/policy-default-as/policy-default-as.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pol, want) {
			t.Errorf("%s differs from testplugins/policy-default-as/policy-default-as.wasm: copy it again (and its sha256 into the config)", cfg.Policy.Path)
		}
	}
	if _, port, _ := strings.Cut(cfg.Listen, ":"); !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return fmt.Sprint(p.ContainerPort) == port }) {
		t.Errorf("the config listens on %s, which is not a container port", cfg.Listen)
	}

	if len(b.ingresses) != 1 {
		t.Fatalf("want one Ingress, got %d", len(b.ingresses))
	}
	ing := b.ingresses[0]
	svc := b.services[0]
	allowed := args(c, "allow-host")
	for _, rule := range ing.Spec.Rules {
		if !slices.Contains(allowed, rule.Host) {
			t.Errorf("Ingress host %q is not in the Deployment's --allow-host: the daemon would answer its requests 403", rule.Host)
		}
		for _, p := range rule.HTTP.Paths {
			be := p.Backend.Service
			if be == nil || be.Name != svc.Name {
				t.Errorf("Ingress path %s: backend is not Service %s", p.Path, svc.Name)
				continue
			}
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
				return sp.Name == be.Port.Name || (be.Port.Number != 0 && sp.Port == be.Port.Number)
			}) {
				t.Errorf("Ingress path %s: Service %s has no port %v", p.Path, svc.Name, be.Port)
			}
		}
	}
	checkAffinity(t, ing)
}

// checkAffinity: the Ingress's backend snippet is the affinity the HAProxy
// test runs (deploy/haproxy/haproxy.cfg), line for line.
func checkAffinity(t *testing.T, ing *networkingv1.Ingress) {
	snippet := ing.Annotations["haproxy.org/backend-config-snippet"]
	for _, must := range []string{"stick match req.hdr(Mcp-Session-Id)", "stick store-response res.hdr(Mcp-Session-Id)"} {
		if !strings.Contains(snippet, must) {
			t.Errorf("Ingress %s: the backend snippet lacks %q", ing.Name, must)
		}
	}
	tested, err := os.ReadFile(filepath.Join(root, "../haproxy/haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(tested), "\n") {
		have[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, l := range strings.Split(snippet, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" && !have[l] {
			t.Errorf("Ingress %s: snippet line %q is not in deploy/haproxy/haproxy.cfg, which the HAProxy test runs", ing.Name, l)
		}
	}
}

func cmSize(cm *corev1.ConfigMap) int {
	b, _ := json.Marshal(cm)
	return len(b)
}
