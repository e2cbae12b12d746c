#!/usr/bin/env bash
# Make sure a PostgreSQL and a MariaDB server answer (and the BigQuery emulator and moto's
# CloudWatch Logs server, for the connector tests, an S3 server for the lake on object storage
# and Apache Iceberg's REST catalog server), and write their addresses to .lakesync-env.
# Order: a DSN already in the environment; the machine's own service on the standard port
# (started if installed but stopped); else a throwaway server in .servers/ on a private port.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\033[1;34m[services]\033[0m %s\n' "$*"; }
SERVERS=$ROOT/.servers
mkdir -p "$SERVERS"

pg_ok() { psql "$1" -Atqc 'select 1' >/dev/null 2>&1; }
my_ok() { mariadb --host=127.0.0.1 --port="$1" --user=root -e 'select 1' >/dev/null 2>&1; }

# --- PostgreSQL ---
PG_DSN=${LAKESYNC_TEST_PG_DSN:-}
if [ -z "$PG_DSN" ]; then
  if ! pg_ok "postgresql://postgres@127.0.0.1:5432/postgres" && [ -d /etc/postgresql ] \
       && [ -n "$(ls /etc/postgresql 2>/dev/null)" ] && command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start >/dev/null 2>&1 || true
    sleep 1
  fi
  if pg_ok "postgresql://postgres@127.0.0.1:5432/postgres"; then
    psql "postgresql://postgres@127.0.0.1:5432/postgres" -Atqc "select 1 from pg_database where datname='test'" | grep -q 1 \
      || psql "postgresql://postgres@127.0.0.1:5432/postgres" -qc "create database test" >/dev/null
    PG_DSN="postgresql://postgres@127.0.0.1:5432/test"
  else
    PORT=55432
    BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    DATA=$SERVERS/pg
    if ! pg_ok "postgresql://postgres@127.0.0.1:$PORT/postgres"; then
      log "starting a throwaway PostgreSQL on port $PORT"
      id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
      if [ ! -f "$DATA/PG_VERSION" ]; then
        mkdir -p "$DATA" && chown postgres "$DATA" "$SERVERS"
        su postgres -s /bin/sh -c "$BIN/initdb -D '$DATA' -U postgres --auth=trust" >/dev/null
      fi
      chown postgres "$SERVERS"
      su postgres -s /bin/sh -c "$BIN/pg_ctl -D '$DATA' -l '$DATA/log' -w start -o \"-p $PORT -k '$DATA' -c listen_addresses=127.0.0.1\"" >/dev/null
    fi
    psql "postgresql://postgres@127.0.0.1:$PORT/postgres" -Atqc "select 1 from pg_database where datname='test'" | grep -q 1 \
      || psql "postgresql://postgres@127.0.0.1:$PORT/postgres" -qc "create database test" >/dev/null
    PG_DSN="postgresql://postgres@127.0.0.1:$PORT/test"
  fi
fi
pg_ok "$PG_DSN" || { echo "PostgreSQL at $PG_DSN does not answer" >&2; exit 1; }

# --- MariaDB ---
MY_DSN=${LAKESYNC_TEST_MYSQL_DSN:-}
if [ -z "$MY_DSN" ]; then
  if ! my_ok 3306 && [ -x /usr/sbin/mariadbd ] && [ -d /var/lib/mysql/mysql ]; then
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >/dev/null 2>&1 || true
    for _ in $(seq 20); do my_ok 3306 && break; sleep 0.5; done
  fi
  if my_ok 3306; then
    MY_PORT=3306
  else
    MY_PORT=53306
    DATA=$SERVERS/mariadb
    if ! my_ok $MY_PORT; then
      log "starting a throwaway MariaDB on port $MY_PORT"
      [ -d "$DATA/mysql" ] || mariadb-install-db --datadir="$DATA" --auth-root-authentication-method=normal >/dev/null
      (/usr/sbin/mariadbd --user=root --datadir="$DATA" --socket="$DATA/mysqld.sock" --port=$MY_PORT \
         --bind-address=127.0.0.1 --skip-grant-tables=0 >"$DATA.log" 2>&1 &)
      for _ in $(seq 40); do my_ok $MY_PORT && break; sleep 0.25; done
    fi
  fi
  mariadb --host=127.0.0.1 --port=$MY_PORT --user=root -e 'create database if not exists test' >/dev/null
  MY_DSN="mysql://root@127.0.0.1:$MY_PORT/test"
fi

# --- BigQuery API emulator (local-bigquery; it needs Python 3.13, so it gets its own venv) ---
BQ_ENDPOINT=${LAKESYNC_TEST_BIGQUERY_ENDPOINT:-}
# An endpoint from an earlier .lakesync-env counts only if it answers (the emulator may be gone).
if [ -n "$BQ_ENDPOINT" ] && ! curl -fsS -o /dev/null "$BQ_ENDPOINT/bigquery/v2/projects/p/datasets" 2>/dev/null; then
  BQ_ENDPOINT=
fi
if [ -z "$BQ_ENDPOINT" ]; then
  BQ_PORT=59050
  BQ=$SERVERS/bigquery
  bq_ok() { curl -fsS -o /dev/null "http://127.0.0.1:$BQ_PORT/bigquery/v2/projects/p/datasets" 2>/dev/null; }
  if ! bq_ok; then
    PY313=$(command -v python3.13 || true)
    # A pyenv shim exists without the version being selected: use it only if it runs.
    [ -n "$PY313" ] && ! "$PY313" -c 'import sys' >/dev/null 2>&1 && PY313=
    if [ -z "$PY313" ] && command -v pyenv >/dev/null; then
      PY313=$(ls -d "$(pyenv root)"/versions/3.13*/bin/python3.13 2>/dev/null | sort -V | tail -1 || true)
    fi
    if [ -z "$PY313" ]; then
      log "no Python 3.13 (python3.13 or pyenv): the BigQuery emulator is not started; its tests skip (fail under CI)"
    else
      if [ ! -x "$BQ/venv/bin/local-bigquery" ]; then
        log "installing the BigQuery emulator (local-bigquery) with $PY313"
        "$PY313" -m venv "$BQ/venv"
        "$BQ/venv/bin/python" -m pip install -q 'local-bigquery==0.3.2' 'duckdb==1.5.5' \
          'duckdb-extension-icu==1.5.5' 'duckdb-extension-json==1.5.5' 'duckdb-extension-parquet==1.5.5' \
          'duckdb-extension-ducklake==1.5.5' 'duckdb-extension-spatial==1.5.5' pytz
      fi
      # DuckDB cannot download extensions here: install the packaged ones where it looks.
      EXT=$HOME/.duckdb/extensions/v1.5.5/linux_amd64
      mkdir -p "$EXT"
      find "$BQ/venv/lib" -name '*.duckdb_extension' -exec cp -n {} "$EXT/" \;
      log "starting the BigQuery emulator on port $BQ_PORT"
      (nohup "$BQ/venv/bin/local-bigquery" serve --host 127.0.0.1 --port $BQ_PORT \
         --grpc-port $((BQ_PORT + 1)) --data-dir "$BQ/data" >"$BQ.log" 2>&1 &)
      for _ in $(seq 60); do bq_ok && break; sleep 0.5; done
    fi
  fi
  bq_ok && BQ_ENDPOINT="http://127.0.0.1:$BQ_PORT"
fi

# --- CloudWatch Logs: moto's standalone server (the dev extra installs moto[server]) ---
CW_ENDPOINT=${LAKESYNC_TEST_CLOUDWATCH_ENDPOINT:-}
cw_ok() { curl -fsS -o /dev/null "$1/moto-api/" 2>/dev/null; }
if [ -n "$CW_ENDPOINT" ] && ! cw_ok "$CW_ENDPOINT"; then
  CW_ENDPOINT=
fi
if [ -z "$CW_ENDPOINT" ]; then
  CW_PORT=59060
  if ! cw_ok "http://127.0.0.1:$CW_PORT"; then
    if [ -x "$ROOT/.venv/bin/moto_server" ]; then
      log "starting moto's server (CloudWatch Logs) on port $CW_PORT"
      (nohup "$ROOT/.venv/bin/moto_server" -H 127.0.0.1 -p $CW_PORT >"$SERVERS/moto.log" 2>&1 &)
      for _ in $(seq 60); do cw_ok "http://127.0.0.1:$CW_PORT" && break; sleep 0.5; done
    else
      log "no .venv/bin/moto_server: the CloudWatch Logs tests skip (fail under CI)"
    fi
  fi
  cw_ok "http://127.0.0.1:$CW_PORT" && CW_ENDPOINT="http://127.0.0.1:$CW_PORT"
fi

# --- S3: S3Proxy on its filesystem backend (why: scripts/README.md), data under .servers/s3 ---
S3_ENDPOINT=${LAKESYNC_TEST_S3_ENDPOINT:-}
S3_KEY=${LAKESYNC_TEST_S3_ACCESS_KEY_ID:-lakesync}
S3_SECRET=${LAKESYNC_TEST_S3_SECRET_ACCESS_KEY:-lakesync-secret}
# Any S3 answers an anonymous listing with XML (an error or the buckets): that is "it answers".
s3_ok() { curl -sS "$1/" 2>/dev/null | grep -q '<Error>\|<ListAllMyBucketsResult'; }
if [ -n "$S3_ENDPOINT" ] && ! s3_ok "$S3_ENDPOINT"; then
  S3_ENDPOINT=
fi
if [ -z "$S3_ENDPOINT" ]; then
  S3_PORT=59070
  S3P_VERSION=4.1.0
  S3P_SHA256=a4d025969aaf796616ed4b1e2491d87d455ce84bb28cb9db086b2e6aaa68b48d
  S3P_JAR=$ROOT/.venv/share/s3proxy/s3proxy-$S3P_VERSION-jar-with-dependencies.jar
  if ! s3_ok "http://127.0.0.1:$S3_PORT"; then
    if [ ! -f "$S3P_JAR" ]; then
      log "downloading S3Proxy $S3P_VERSION (Maven Central)"
      mkdir -p "$(dirname "$S3P_JAR")"
      # Best effort, like the emulators: without it only the object-storage tests skip (fail under CI).
      if curl -fsSL -o "$S3P_JAR.part" \
           "https://repo1.maven.org/maven2/org/gaul/s3proxy/$S3P_VERSION/$(basename "$S3P_JAR")" \
         && echo "$S3P_SHA256  $S3P_JAR.part" | sha256sum -c --quiet; then
        mv "$S3P_JAR.part" "$S3P_JAR"
      else
        rm -f "$S3P_JAR.part"
        log "could not download S3Proxy: the S3 tests skip (fail under CI)"
      fi
    fi
  fi
  if ! s3_ok "http://127.0.0.1:$S3_PORT" && [ -f "$S3P_JAR" ] && command -v java >/dev/null; then
    mkdir -p "$SERVERS/s3/data"
    cat > "$SERVERS/s3/s3proxy.conf" <<CONF
s3proxy.endpoint=http://127.0.0.1:$S3_PORT
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$S3_KEY
s3proxy.credential=$S3_SECRET
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir=$SERVERS/s3/data
CONF
    log "starting S3Proxy (S3 on local files) on port $S3_PORT"
    (nohup java -Xmx256m -jar "$S3P_JAR" --properties "$SERVERS/s3/s3proxy.conf" >"$SERVERS/s3.log" 2>&1 &)
    for _ in $(seq 60); do s3_ok "http://127.0.0.1:$S3_PORT" && break; sleep 0.5; done
  fi
  s3_ok "http://127.0.0.1:$S3_PORT" && S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
fi

# --- Iceberg REST catalog: Apache Iceberg's own RESTCatalogServer (Maven Central) ---
# Its jars are resolved once into .venv/share/lakesync/rest-catalog (scripts/rest-catalog/pom.xml;
# ~25 s on a fresh machine, ~5 s with a warm ~/.m2), then it runs with `java -cp`, backed by a
# SQLite JDBC catalog and a file warehouse in .servers/rest-catalog. Tests that write start their
# own server from the same jars (tests/lakehouse/rest_catalog.py): one catalog per test lake.
REST_URI=${LAKESYNC_TEST_REST_CATALOG_URI:-}
rest_ok() { curl -fsS -o /dev/null "$1/v1/config" 2>/dev/null; }
if [ -n "$REST_URI" ] && ! rest_ok "$REST_URI"; then
  REST_URI=
fi
REST_JARS=$ROOT/.venv/share/lakesync/rest-catalog
REST_POM=$ROOT/scripts/rest-catalog/pom.xml
if [ ! -f "$REST_JARS/.pom.xml" ] || ! cmp -s "$REST_POM" "$REST_JARS/.pom.xml"; then
  if command -v mvn >/dev/null && [ -d "$ROOT/.venv" ]; then
    log "resolving the Iceberg REST catalog server's jars (Maven Central) into $REST_JARS"
    rm -rf "$REST_JARS"
    mvn -q -B -f "$REST_POM" dependency:copy-dependencies -DoutputDirectory="$REST_JARS" >/dev/null
    cp "$REST_POM" "$REST_JARS/.pom.xml"
  else
    log "no mvn or .venv: the REST catalog server is not installed; its tests skip (fail under CI)"
  fi
fi
if [ -z "$REST_URI" ] && [ -f "$REST_JARS/.pom.xml" ]; then
  REST_PORT=59181
  REST=$SERVERS/rest-catalog
  if ! rest_ok "http://127.0.0.1:$REST_PORT"; then
    log "starting the Iceberg REST catalog server on port $REST_PORT"
    mkdir -p "$REST/warehouse"
    # CATALOG_* variables become the backing catalog's properties (RCKUtils: `__` is `-`, `_` is `.`).
    (CATALOG_URI="jdbc:sqlite:$REST/catalog.db" CATALOG_WAREHOUSE="file://$REST/warehouse" \
       CATALOG_REST_PORT=$REST_PORT CATALOG_JDBC_SCHEMA__VERSION=V1 \
       nohup java -Xmx512m -cp "$REST_JARS/*" org.apache.iceberg.rest.RESTCatalogServer \
       >"$REST.log" 2>&1 &)
    for _ in $(seq 60); do rest_ok "http://127.0.0.1:$REST_PORT" && break; sleep 0.5; done
  fi
  rest_ok "http://127.0.0.1:$REST_PORT" && REST_URI="http://127.0.0.1:$REST_PORT"
fi

cat > "$ROOT/.lakesync-env" <<ENV
export LAKESYNC_TEST_PG_DSN='$PG_DSN'
export LAKESYNC_TEST_MYSQL_DSN='$MY_DSN'
ENV
if [ -n "$BQ_ENDPOINT" ]; then
  echo "export LAKESYNC_TEST_BIGQUERY_ENDPOINT='$BQ_ENDPOINT'" >> "$ROOT/.lakesync-env"
fi
if [ -n "$CW_ENDPOINT" ]; then
  echo "export LAKESYNC_TEST_CLOUDWATCH_ENDPOINT='$CW_ENDPOINT'" >> "$ROOT/.lakesync-env"
fi
if [ -n "$REST_URI" ]; then
  echo "export LAKESYNC_TEST_REST_CATALOG_URI='$REST_URI'" >> "$ROOT/.lakesync-env"
fi
if [ -n "$S3_ENDPOINT" ]; then
  cat >> "$ROOT/.lakesync-env" <<ENV
export LAKESYNC_TEST_S3_ENDPOINT='$S3_ENDPOINT'
export LAKESYNC_TEST_S3_ACCESS_KEY_ID='$S3_KEY'
export LAKESYNC_TEST_S3_SECRET_ACCESS_KEY='$S3_SECRET'
ENV
fi
log "PostgreSQL: $PG_DSN  MariaDB: $MY_DSN  BigQuery emulator: ${BQ_ENDPOINT:-none}  CloudWatch Logs: ${CW_ENDPOINT:-none}  S3: ${S3_ENDPOINT:-none}  REST catalog: ${REST_URI:-none}"
