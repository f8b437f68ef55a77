"""What both ends of the RPC share: the generated code (``_proto``), proto <-> domain conversion
(:mod:`.wire`), the client the hooks and the command line use, and the TLS files."""
