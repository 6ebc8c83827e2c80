"""Process-level fault injection against real members, and the event logs it writes."""
