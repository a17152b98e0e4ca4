"""The Docker backend: sandboxes as containers on a local or remote Docker engine."""
