"""Adapters for the harnesses people already run (OSWorld, SWE-ReX)."""
