"""Private helpers shared by every operator; nothing here is public API."""
