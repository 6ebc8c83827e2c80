"""The huddle member library."""
