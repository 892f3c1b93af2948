"""Who a client is, from its TLS certificate; the TLS contexts of both sides of the proxy."""
