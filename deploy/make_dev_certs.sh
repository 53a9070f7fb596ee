#!/usr/bin/env bash
# Makes a development CA and one certificate it signs, for trying pstrain's
# TLS (and mutual TLS) on one machine or a small test cluster:
#
#   deploy/make_dev_certs.sh DIR [HOST ...]
#
# DIR/ca.pem, DIR/ca.key: the CA (keep ca.key to yourself).
# DIR/node.pem, DIR/node.key: a certificate for localhost, 127.0.0.1, this
# machine's host name and every HOST given, good for serving and for
# calling (mutual TLS). Every daemon of a job can share it:
#   --tls_cert=DIR/node.pem --tls_key=DIR/node.key --tls_ca=DIR/ca.pem
# Not for production: one key for everyone, valid 30 days.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [HOST ...]" >&2
  exit 2
fi
DIR="$1"
shift
mkdir -p "$DIR"
cd "$DIR"
san="DNS:localhost,IP:127.0.0.1,DNS:$(hostname)"
for h in "$@"; do
  if [[ "$h" =~ ^[0-9.]+$ ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
done
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout ca.key -out ca.pem -subj "/CN=pstrain development CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout node.key -out node.csr -subj "/CN=pstrain node" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > node.ext
openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
  -extfile node.ext -out node.pem 2>/dev/null
rm -f node.csr node.ext ca.srl
chmod 600 ca.key node.key
echo "make_dev_certs: $DIR/{ca.pem,node.pem,node.key} for $san" >&2
