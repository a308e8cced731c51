"""Telling tenants what happened to their jobs."""
