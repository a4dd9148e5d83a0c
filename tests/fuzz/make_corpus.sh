#!/usr/bin/env bash
# Regenerates the seed corpus tests/fuzz/corpus/ from the specs of ops/ and
# tests/specs/ and the malformed and tricky specs of tests/c/test_check.c,
# tests/c/test_parse.c and tests/c/test_autodiff.c (their tables, compiled with main renamed).
# Run from anywhere; needs a C compiler. Files are named by their content's
# hash, so a rerun only adds what is new.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/tests/fuzz/corpus"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

cat > "$tmp/dump.h" <<'C'
#include <stdio.h>
static void dump(const char *dir, const char *tag, int i, const char *s, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%03d", dir, tag, i);
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(s, 1, n, f); fclose(f); }
}
C
cat > "$tmp/check_tables.c" <<'C'
#define main test_main
#include "test_check.c"
#undef main
#include "dump.h"
int main(int argc, char **argv) {
    (void)argc;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++)
        dump(argv[1], "check", (int)i, k_bad[i].text, strlen(k_bad[i].text));
    for (size_t i = 0; i < sizeof k_bad_link / sizeof k_bad_link[0]; i++)
        dump(argv[1], "link", (int)i, k_bad_link[i].text, strlen(k_bad_link[i].text));
    for (size_t i = 0; i < sizeof k_good / sizeof k_good[0]; i++)
        dump(argv[1], "good", (int)i, k_good[i].text, strlen(k_good[i].text));
    return 0;
}
C
cat > "$tmp/autodiff_tables.c" <<'C'
#define main test_main
#include "test_autodiff.c"
#undef main
#include "dump.h"
int main(int argc, char **argv) {
    (void)argc;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++)
        dump(argv[1], "autodiff", (int)i, k_bad[i].text, strlen(k_bad[i].text));
    dump(argv[1], "autodiff-sp", 0, k_sp, strlen(k_sp));
    return 0;
}
C
cat > "$tmp/parse_tables.c" <<'C'
#define main test_main
#include "test_parse.c"
#undef main
#include "dump.h"
int main(int argc, char **argv) {
    (void)argc;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        dump(argv[1], "parse", (int)i, bad_cases[i].src, strlen(bad_cases[i].src));
    return 0;
}
C
cc=${CC:-cc}
inc="-I$root/compiler -I$root/runtime -I$root/tests/c -I$tmp"
echo 'const char *tk_kernel_header(void); const char *tk_kernel_header(void) { return ""; }' > "$tmp/hdr.c"
core=$(ls "$root"/compiler/*.c "$root"/runtime/*.c | grep -v '/tkc\.c$')
for t in check parse autodiff; do
  $cc -std=c11 -w $inc "$tmp/${t}_tables.c" $core "$tmp/hdr.c" -o "$tmp/$t" -lm -ldl -lpthread
  mkdir -p "$tmp/out"
  "$tmp/$t" "$tmp/out"
done
cp "$root"/ops/*.tk "$root"/tests/specs/*.tk "$tmp/out/"
for f in "$tmp"/out/*; do
  cp "$f" "$out/$(sha1sum "$f" | cut -c1-16)"
done
echo "make_corpus: $(ls "$out" | wc -l) files in $out"
