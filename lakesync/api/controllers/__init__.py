"""HTTP and WebSocket route handlers: decode, authenticate, call a service, encode."""
