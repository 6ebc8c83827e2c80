"""The huddle group coordinator service."""
