#!/usr/bin/env bash
# Install PostgreSQL (Debian's package) when no pg_ctl is found; the store tests start a throwaway cluster with it.
set -euo pipefail

if command -v pg_ctl >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq postgresql >/dev/null
