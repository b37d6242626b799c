"""Public data sets: their sources and the fetcher that downloads, verifies and unpacks them."""
