#!/bin/bash
# Submits a fedpq deployment to Slurm: the server job (fedpq-server.sbatch)
# and its N clients as a job array of fleets (fedpq-clients.sbatch), S
# clients a task (FEDPQ_BLOCK_SIZE, default 1: N/S tasks, rounded up), that
# may start once the server job has.
#   deploy/slurm/submit.sh RUN_DIR N [fedpq server flags...]
# RUN_DIR must be on a file system that every node shares. It makes
# RUN_DIR/token (a fresh join token) unless there is one, and uses RUN_DIR/tls/
# where it exists (ca.pem, server.pem, server.key: fedpq cert --names
# NODE,NODE,... --out RUN_DIR/tls). Set FEDPQ to the fedpq binary's path
# where it is not on the nodes' PATH, and FEDPQ_CLIENT_FLAGS to flags for
# every task's clients (such as "--data-dir /shared/mnist"). Prints the two
# job ids.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RUN_DIR N [fedpq server flags...]" >&2; exit 2; }
run=$(realpath -m "$1"); n=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$run"
if [ ! -s "$run/token" ]; then
  (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' > "$run/token")
fi
rm -f "$run/server-address"
export FEDPQ_RUN=$run
server=$(sbatch --parsable --chdir "$run" "$here/fedpq-server.sbatch" --clients "$n" "$@")
server=${server%%;*}
# shellcheck disable=SC2086 # FEDPQ_CLIENT_FLAGS is a list of flags
size=${FEDPQ_BLOCK_SIZE:-1}
tasks=$(((n + size - 1) / size))
clients=$(sbatch --parsable --chdir "$run" --array "0-$((tasks - 1))" --dependency "after:$server" \
  --export "ALL,FEDPQ_CLIENTS=$n,FEDPQ_BLOCK_SIZE=$size" "$here/fedpq-clients.sbatch" ${FEDPQ_CLIENT_FLAGS:-})
echo "server job $server, clients job array ${clients%%;*} (tasks 0-$((tasks - 1)), $size clients each); run directory $run"
