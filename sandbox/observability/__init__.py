"""What operators watch: Prometheus metrics (``metrics``, served at ``/metrics``) and structured logs (``logs``)."""
