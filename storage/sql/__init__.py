"""The `viewmill sql` sandbox: the query check, its allow-lists and the sandboxed connection."""
