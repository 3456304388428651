"""A relay through which a mesh spans places: QUIC with mutual TLS under the deployment's own CA (seed 004)."""
