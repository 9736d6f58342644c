"""Loop-IR transforms."""
