#!/bin/sh
# Trust the extra CA certificate(s) the build was given (networks that re-sign TLS). Without one
# the directory holds only its README and nothing changes.
set -eu
dir=/usr/local/share/ca-certificates/megatron-bench
if ls "$dir"/*.crt >/dev/null 2>&1; then
    update-ca-certificates
    echo "trusting extra CA certificate(s): $(ls "$dir"/*.crt)"
fi
