"""Helpers for tests and examples: seeded example programs and numeric checks."""
