"""The huddle wire protocol: messages, error codes, framing. No I/O."""
