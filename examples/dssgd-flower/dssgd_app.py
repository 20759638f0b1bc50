"""The DSSGD Flower App's components (``flwr run examples/dssgd-flower``).

Every machine needs dpaudit importable (installed, or its checkout on PYTHONPATH): this module
only names the apps of :mod:`defenses.dssgd.deployment`, which documents the federation.
"""

from defenses.dssgd.deployment import make_client_app, make_server_app

client = make_client_app()
server = make_server_app()
