#!/usr/bin/env bash
# Installs what building and testing Weir needs when it is missing. Sourced by
# scripts/start.sh (`need_build_tools`) and scripts/test.sh (`need_test_tools`).
#
# RocksDB is compiled from source and bindgen links libclang at build time (clang-sys
# without its `runtime` feature). clang-sys then accepts exactly `libclang.so` or
# `libclang-<version>.so` in its search directories (or $LIBCLANG_PATH): not the `.so.N`
# files Debian's libclang1-N alone installs, and not `libclang-cpp.so*`, another
# library many images carry. So those names, in those directories, are what we look for;
# when none is there we install Debian's libclang-dev.

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
APT_UPDATED=""

apt_install() {
  if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -q; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$@"
}

# True when a libclang that clang-sys can link is present (its DIRECTORIES_LINUX).
have_libclang() {
  local f
  for f in ${LIBCLANG_PATH:+"$LIBCLANG_PATH"/libclang.so "$LIBCLANG_PATH"/libclang-[0-9]*.so} \
    /usr/local/llvm*/lib*/libclang.so /usr/local/llvm*/lib*/libclang-[0-9]*.so \
    /usr/local/lib*/libclang.so /usr/local/lib*/libclang-[0-9]*.so \
    /usr/local/lib*/*/libclang.so /usr/local/lib*/*/libclang-[0-9]*.so \
    /usr/local/lib*/*/*/libclang.so /usr/local/lib*/*/*/libclang-[0-9]*.so \
    /usr/lib*/libclang.so /usr/lib*/libclang-[0-9]*.so \
    /usr/lib*/*/libclang.so /usr/lib*/*/libclang-[0-9]*.so \
    /usr/lib*/*/*/libclang.so /usr/lib*/*/*/libclang-[0-9]*.so; do
    [ -e "$f" ] && return 0
  done
  return 1
}

need_build_tools() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required: install Rust from your package manager or rustup" >&2
    exit 1
  fi
  if ! have_libclang; then
    echo "libclang (needed to build RocksDB) is missing: installing Debian's libclang-dev" >&2
    apt_install libclang-dev
  fi
  # librdkafka's bundled build needs a C compiler and make.
  command -v cc >/dev/null 2>&1 || apt_install build-essential
}

# Clients and services the test suite drives: psql, pgjdbc (Debian's
# libpostgresql-jdbc-java, run by the JDK's single-file `java` launcher), sqlsmith,
# and a Python venv with psycopg 3 and the S3 endpoint (moto).
need_test_tools() {
  need_build_tools
  local missing=()
  command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
  command -v java >/dev/null 2>&1 || missing+=(default-jdk-headless)
  [ -e /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
  command -v sqlsmith >/dev/null 2>&1 || missing+=(sqlsmith)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  # The dashboard's browser test: headless Chromium driven over WebDriver.
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing test tools: ${missing[*]}" >&2
    apt_install "${missing[@]}"
  fi
  VENV="${WEIR_VENV:-$HOME/.cache/weir-venv}"
  if [ ! -x "$VENV/bin/moto_server" ] || ! "$VENV/bin/python" -c 'import psycopg, selenium' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q 'moto[s3]==5.2.1' flask flask-cors 'psycopg[binary]==3.2.*' 'selenium==4.27.*'
  fi
  export WEIR_PYTHON="$VENV/bin/python"
}
