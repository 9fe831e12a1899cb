#!/bin/sh
# Grafana's entrypoint in docker-compose.yml: refuses to serve beyond loopback with the built-in default (or an
# empty) admin password. GF_SECURITY_ADMIN_PASSWORD only applies when Grafana's database is created, so when exposed
# the password set now is also written into the existing database (a volume created on a laptop with the default
# keeps it otherwise).
set -eu
default_password="verl-otel"    # docker-compose.yml's ${GF_ADMIN_PASSWORD:-verl-otel}
bind="${VERL_OTEL_UI_BIND:-127.0.0.1}"
password="${GF_SECURITY_ADMIN_PASSWORD:-}"

case "$bind" in
  127.*|localhost|::1|"[::1]")
    ;;
  *)
    if [ -z "$password" ] || [ "$password" = "$default_password" ]; then
      echo "verl-otel: Grafana would listen on $bind:3000 (VERL_OTEL_UI_BIND) with the default admin password;" >&2
      echo "verl-otel: set GF_ADMIN_PASSWORD=<your password> or keep VERL_OTEL_UI_BIND=127.0.0.1. Not starting." >&2
      exit 64
    fi
    grafana cli --homepath "$GF_PATHS_HOME" --config "$GF_PATHS_CONFIG" \
      --configOverrides "cfg:default.paths.data=$GF_PATHS_DATA" admin reset-admin-password "$password" >/dev/null
    ;;
esac
exec "${VERL_OTEL_GRAFANA_RUN:-/run.sh}" "$@"   # the image's own entrypoint
