"""The signing secret of the tenant's webhook endpoint that the ``receiver`` fixture (tests/conftest.py) runs."""

SECRET = "whsec-test-secret"
