# Sourced first by every benchmark script that needs two hosts:
#   . "$(dirname "$0")/lib.sh"; in_lab [netsteer lab with FLAGS...] -- "$@"
# It builds netsteer (release) and runs the calling script again under `netsteer lab with`:
# the lab's client and server namespaces joined by a veth link, removed when the script ends,
# fails, or is interrupted (and by `netsteer lab clean` after a kill -9). Inside, it sets
#   bin             the netsteer binary
#   nsa nsb         the client's and the server's namespace
#   va vb           their ends of the link
#   server_addr     the server's address on the link
# No script keeps its own namespace set-up.
self=$(realpath "$0")
cd "$(dirname "$self")/.."
bin=$PWD/target/release/netsteer
in_lab() {
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  if [ -z "${NETSTEER_LAB_SERVER_NS:-}" ]; then
    cargo build --release -q -p netsteer
    exec "$bin" lab with "${flags[@]}" -- "$self" "$@"
  fi
  nsa=$NETSTEER_LAB_CLIENT_NS; nsb=$NETSTEER_LAB_SERVER_NS
  va=$NETSTEER_LAB_CLIENT_DEV; vb=$NETSTEER_LAB_SERVER_DEV
  server_addr=$NETSTEER_LAB_SERVER_ADDR
}
