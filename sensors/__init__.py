"""Sensors (uploads, failed runs) and schedules."""
