"""Prefect: the flows and tasks over the stages, deployments, which server, what the UI shows."""
