"""The operator's view of a Kubernetes fleet: the custom resources of ``deploy/helm/sandbox/crds`` kept in step with
the control plane, by the replica that leads.

- ``Sandbox`` objects mirror the sandboxes (sandboxes.py): one per sandbox record, named by its id, spec and status
  written by the control plane; ``kubectl delete sandbox NAME`` ends that sandbox; the sandbox's pod is the object's
  dependent (an ownerReference);
- a ``Sandbox`` applied with kubectl is a declared sandbox (declared.py): created through the service, its status
  written back, ended when the object is deleted;
- ``SandboxPool`` objects are warm pools (sandboxpools.py): created, edited, scaled (``kubectl scale``) and deleted by
  operators, applied to the service's pools, their status written back;
- resources.py: the objects as pure functions of the records; informer.py: list + watch caches; operator.py: the
  loop that runs both while this replica leads; settings.py: its settings (no kubernetes import: the server reads
  them whatever the backend).

Only the Kubernetes backend has an operator: ``sandbox.server`` imports operator.py lazily, for that backend only.
"""
