"""Staff review of conversations: flags and filters, the turn timeline, the access log, retry."""
