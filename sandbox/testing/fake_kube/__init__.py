"""A fake Kubernetes API server for tests and benchmarks: real HTTP on 127.0.0.1, spoken to by the real
kubernetes_asyncio client through a kubeconfig (not a mock of Python calls).

    with FakeKube(mode="realize", owner="test-1234") as kube:   # or: await asyncio.to_thread(kube.start)
        config = KubernetesConfig(kubeconfig=kube.kubeconfig, owner="test-1234", ...)

- objects.py: the object store and its REST semantics (uids, resourceVersions, watch history, garbage collection of
  dependents, finalizers); rest.py: Status errors, selectors, merge patches;
- custom.py: custom resources, served once their CustomResourceDefinition is created (status and scale
  subresources, generation, schema defaults, an optional validator such as the CRD's schema);
- app.py: the HTTP side (aiohttp): core/v1 pods (and pods/log), secrets, persistentvolumeclaims, namespaces,
  networking.k8s.io/v1 networkpolicies, apiextensions.k8s.io/v1 CRDs and the custom resources they define,
  ``?watch=true`` streams, discovery, 401 and on-demand 403;
- realize.py + container_spec.py (mode "realize"): each pod becomes a Docker container on an internal network the
  harness creates; the pod's IP is the container's; a dead container shows as the kubelet would show it;
- simulate.py (mode "simulate"): pods scheduled over N simulated nodes, Running at once, never realized; a node can
  be lost; sim_agent.py (``agents=True``): one TCP server answering the agent protocol (hello with the pod's own
  token, ping, health) for every simulated pod;
- scheduler.py (``allocatable={"cpu": ..., "memory": ...}``, either mode): nodes of limited room; a pod that does
  not fit stays Pending, unschedulable, with the scheduler's condition and FailedScheduling Event, until a pod goes;
  quota.py: ResourceQuota objects refuse pod creates past them (403 "exceeded quota"); quantities.py: the sums;
- psa.py: Pod Security admission (403 "violates PodSecurity", in the plugin's words) in namespaces that enforce it;
- harness.py: ``FakeKube``, the server in a thread of its own, its kubeconfig and the controls; ``Realism``: what a
  real server does that tests must meet (history expiring: 410; bookmarks; 429 with Retry-After; Pod Security; node
  loss as Ready=False, then eviction), all on in the k8s test suite (``SUITE``).
"""

from sandbox.testing.fake_kube.harness import SUITE, FakeKube, Realism

__all__ = ["SUITE", "FakeKube", "Realism"]
