"""Kernel-IR transforms."""
