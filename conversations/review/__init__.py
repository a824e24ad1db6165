"""Staff review of conversations: flags and filters, the turn timeline, access log, purge."""
