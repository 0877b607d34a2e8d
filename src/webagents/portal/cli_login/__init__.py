"""The command line's sign-in (P3): the browser flow through /cli/auth and a callback on
127.0.0.1, the device authorization grant (RFC 8628) for machines without a browser, and
logout, which revokes the token."""
