#!/usr/bin/env bash
# One dialect for nabla's public API (issue 30, item 4): renames and argument reorders applied
# mechanically, so they can be re-run on main after other branches merged code using old names.
#
#   scripts/rename_api.sh            # from anywhere inside the repository
#
# Idempotent: every new name differs from every old name, except five layer/function pairs
# where the module type takes the name its functional form had (nb_layer_norm, nb_embedding,
# nb_dropout, blk_rms_norm, blk_swiglu: the function becomes nb_f_* / blk_f_*). A call of one
# of those five, `name(`, is always the old function (a type is never followed by '('), so
# calls are renamed on every run; a bare mention (prose, a backticked name) is renamed only
# while the headers still show the old API, and is listed for review afterwards. Argument
# reorders of functions that keep their name run only while their header declaration still
# has the old order. Run it on a clean tree: it then formats the changed C lines with
# clang-format-diff-14 (only those lines; other files' formatting is left alone).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[ -f include/nabla/nn.h ] || { echo "rename_api.sh: not a nabla tree" >&2; exit 1; }

# Text files under the renamed paths (this script itself excepted).
mapfile -t files < <(git ls-files -- include tensor autograd nn examples tests bench docs fuzz \
                         scripts README.md meson_options.txt |
                     grep -v '^scripts/rename_api\.sh$' | xargs -r grep -IlE '(nb|blk)_' || true)

perl_prog=$(mktemp)
trap 'rm -f "$perl_prog"' EXIT
cat >"$perl_prog" <<'PERL'
use strict;
use warnings;

sub slurp { my ($f) = @_; open my $h, '<', $f or die "$f: $!"; local $/; my $s = <$h>; $s }
sub header_has { my ($f, $re) = @_; return slurp($f) =~ $re ? 1 : 0 }

# ---- which parts of the old API are still there (decided once, before any file changes) ----
my $nn = 'include/nabla/nn.h';
my $blocks = 'include/nabla/blocks.h';
# Layer/function pairs whose module type takes the function's old name.
# [old function, new function, guard (old API present), argument order of the new call or undef]
my @swapped = (
    ['nb_layer_norm', 'nb_f_layer_norm', header_has($nn, qr/\bnb_layernorm_new\b/), undef],
    ['nb_embedding', 'nb_f_embedding', header_has($nn, qr/\bnb_embedding_layer\b/), undef],
    # context first: nb_dropout(x, p, train, rng) -> nb_f_dropout(rng, x, p, train)
    ['nb_dropout', 'nb_f_dropout', header_has($nn, qr/\bnb_dropout_layer\b/), [3, 0, 1, 2]],
    ['blk_rms_norm', 'blk_f_rms_norm', header_has($blocks, qr/\bblk_rmsnorm\b/), undef],
    ['blk_swiglu', 'blk_f_swiglu', header_has($blocks, qr/\bblk_swiglu_ff\b/), undef],
);
# Renames of identifiers that start with the old name (constructor, forward, type alike).
my @prefix = (['nb_layernorm', 'nb_layer_norm'], ['blk_rmsnorm', 'blk_rms_norm']);
# Whole-word renames. No new name here is an old name anywhere in this script.
my @exact = (
    ['nb_embedding_layer', 'nb_embedding'],
    ['nb_dropout_layer', 'nb_dropout'],
    ['blk_swiglu_ff', 'blk_swiglu'],
    ['nb_module_params', 'nb_module_named_params'],
    ['nb_module_buffers', 'nb_module_named_buffers'],
    ['nb_module_parameters', 'nb_module_param_tensors'],
    ['nb_module_numel', 'nb_module_param_numel'],
    ['nb_scope_create', 'nb_scope_new'],
    ['nb_scope_destroy', 'nb_scope_free'],
    ['nb_loader_num_batches', 'nb_loader_batch_count'],
    ['nb_grad_reducer_buckets', 'nb_grad_reducer_bucket_count'],
    ['nb_kv_cache_layers', 'nb_kv_cache_layer_count'],
);
# The names these functions give themselves in error messages ("module_params: ...").
my @quoted = (
    ['module_params', 'module_named_params'],
    ['module_buffers', 'module_named_buffers'],
    ['module_parameters', 'module_param_tensors'],
);
# Reorders of functions that keep their name: [name, new order (old argument indices), header,
# the header's old declaration]. Count before array; the generator right after the object.
my $params_n = qr/nb_tensor\s*\*\s*const\s*\*\s*params,\s*int\s+n\b/;
my @reorder = (
    ['nb_sgd_new', [1, 0, 2], 'include/nabla/optim.h', qr/nb_sgd_new\($params_n/],
    ['nb_adam_new', [1, 0, 2], 'include/nabla/optim.h', qr/nb_adam_new\($params_n/],
    ['nb_adamw_new', [1, 0, 2], 'include/nabla/optim.h', qr/nb_adamw_new\($params_n/],
    ['nb_optimizer_add_group', [0, 2, 1, 3, 4], 'include/nabla/optim.h',
     qr/nb_optimizer_add_group\(nb_optimizer\s*\*\s*opt,\s*$params_n/],
    ['nb_clip_grad_norm', [1, 0, 2], 'include/nabla/optim.h', qr/nb_clip_grad_norm\($params_n/],
    ['nb_grad_reducer_new', [1, 0, 2], 'include/nabla/dist.h', qr/nb_grad_reducer_new\($params_n/],
    ['nb_dist_sum_doubles', [1, 0], 'include/nabla/dist.h',
     qr/nb_dist_sum_doubles\(double\s*\*\s*v,\s*int\s+n\)/],
    ['blk_mla_cache_new', [1, 0, 2, 3], $blocks,
     qr/blk_mla_cache_new\(blk_mla\s*\*\s*const\s*\*\s*layers,\s*int\s+n_layers/],
    ['nb_sample_logits', [2, 0, 1], 'include/nabla/generate.h',
     qr/nb_sample_logits\(const\s+nb_tensor\s*\*\s*logits/],
    ['nb_dataset_split', [0, 2, 1, 3, 4], 'include/nabla/data.h',
     qr/nb_dataset_split\(const\s+nb_dataset\s*\*\s*ds,\s*int64_t\s+n_val/],
);
@reorder = grep { header_has($_->[2], $_->[3]) } @reorder;
# Callbacks: the user pointer first, count before array. [header, its old declaration,
# [definition pattern, replacement], [callee of the calls, new order]...]; a definition of such
# a callback under another name is caught by the compiler (incompatible pointer types), as is
# a direct call of one.
my @callbacks = grep { header_has($_->[0], $_->[1]) } (
    ['include/nabla/generate.h', qr/\(\*on_token\)\(int64_t token, void \*ctx\)/,
     [qr/\(int64_t (\w+),\s*void \*(\w+)\)/, sub { "(void *$2, int64_t $1)" }],
     [qr/(?<=->)on_token|(?<=\.)on_token/, [1, 0]]],
    ['include/nabla/train.h', qr/\(\*start\)\(nb_module \*model, nb_tensor \*const \*params, int n/,
     [qr/\(nb_module \*(\w+),\s*nb_tensor \*const \*(\w+),\s*int (\w+),\s*int (\w+)\)/,
      sub { "(nb_module *$1, int $3, nb_tensor *const *$2, int $4)" }],
     [qr/(?<=dist->)start/, [0, 2, 1, 3]]],
    ['include/nabla/train.h', qr/\(\*sum\)\(void \*state, double \*v, int n\)/,
     [qr/\(void \*(\w+),\s*double \*(\w+),\s*int (\w+)\)/, sub { "(void *$1, int $3, double *$2)" }],
     [qr/(?<=dist->)sum/, [0, 2, 1]]],
);

# ---- argument lists ----------------------------------------------------------------------
# Splits the argument list that starts at $p (just after '(') at its top-level commas, skipping
# nested brackets, string and character literals and comments. Returns (index of the closing
# ')', [arguments as written]), or nothing when it is not a well-formed call (prose).
sub split_args {
    my ($s, $p) = @_;
    my ($start, $depth, $n, @args) = ($p, 0, length $s);
    while ($p < $n) {
        my $c = substr($s, $p, 1);
        if ($c eq '"') {
            pos($s) = $p;
            return unless $s =~ /\G"(?:[^"\\\n]|\\.)*"/g;
            $p = pos($s);
            next;
        }
        if ($c eq "'" && substr($s, $p) =~ /^('(?:\\.[^']*|[^\\'])')/) {
            $p += length $1;
            next;
        }
        if (substr($s, $p, 2) eq '/*') {
            my $e = index($s, '*/', $p + 2);
            return if $e < 0;
            $p = $e + 2;
            next;
        }
        if ($c eq "\n" && substr($s, $p + 1, 1) eq "\n") { return }    # a paragraph: prose
        if ($c =~ /[(\[{]/) {
            $depth++;
        } elsif ($c =~ /[)\]}]/) {
            if ($depth == 0) {
                return unless $c eq ')';
                push @args, substr($s, $start, $p - $start);
                return ($p, \@args);
            }
            $depth--;
        } elsif ($c eq ',' && $depth == 0) {
            push @args, substr($s, $start, $p - $start);
            $start = $p + 1;
        }
        $p++;
    }
    return;
}

# Rewrites every call `$old(...)` as `$new(...)` with its arguments in order @$perm (new
# argument k is old argument $perm->[k]); each slot keeps its own surrounding whitespace.
# Calls nested in the arguments are rewritten too. Calls with another argument count are left
# as they are and reported.
my $file = '';
sub rewrite_calls {
    my ($s, $old, $new, $perm) = @_;
    return rewrite_calls_of($s, qr/(?<![\w.>])\Q$old\E/, $new, $perm);
}
# The same for calls whose callee matches $callee_re ($new undef: the name as it was).
sub rewrite_calls_of {
    my ($s, $callee_re, $new, $perm) = @_;
    my ($out, $pos) = ('', 0);
    while ($s =~ /($callee_re)\(/g) {
        my ($at, $after, $old) = ($-[0], $+[0], $1);
        my ($end, $args) = split_args($s, $after);
        if (!defined $end) {
            next;
        }
        my @a = map { rewrite_calls_of($_, $callee_re, $new, $perm) } @$args;
        my $text;
        if (!$perm) {
            $text = join ',', @a;
        } elsif (@a != @$perm) {
            my $line = 1 + (() = substr($s, 0, $at) =~ /\n/g);
            print STDERR "rename_api: $file: a call of $old with " . scalar(@a) .
                " arguments left as it is (near line $line of its text)\n";
            next;
        } else {
            my @parts = map { /^(\s*)(.*?)(\s*)$/s; [$1, $2, $3] } @a;
            $text = join ',', map { $parts[$_][0] . $parts[$perm->[$_]][1] . $parts[$_][2] }
                0 .. $#parts;
        }
        $out .= substr($s, $pos, $at - $pos) . ($new // $old) . "($text)";
        $pos = $end + 1;
        pos($s) = $pos;
    }
    return $out . substr($s, $pos);
}

for my $f (@ARGV) {
    $file = $f;
    my $whole = slurp($file);
    # Text between <!-- rename_api: keep --> and <!-- /rename_api --> (the changelog of these
    # very renames, the conventions page) is left as written.
    my @kept;
    (my $s = $whole) =~ s{(<!-- rename_api: keep\b.*?<!-- /rename_api -->)}
                         {push @kept, $1; "\x00KEPT$#kept\x00"}gse;
    my $orig = $s;
    for my $r (@swapped) {
        my ($old, $new, $old_api, $perm) = @$r;
        $s = rewrite_calls($s, $old, $new, $perm);
        $s =~ s/\b\Q$old\E\b/$new/g if $old_api;
    }
    for my $r (@reorder) { $s = rewrite_calls($s, $r->[0], $r->[0], $r->[1]) }
    for my $r (@callbacks) {
        my (undef, undef, $def, @calls) = @$r;
        my ($re, $to) = @$def;
        $s =~ s/$re/$to->()/ge;
        $s = rewrite_calls_of($s, $_->[0], undef, $_->[1]) for @calls;
    }
    for my $r (@prefix) { my ($o, $n) = @$r; $s =~ s/\b\Q$o\E(\w*)/$n$1/g }
    for my $r (@exact) { my ($o, $n) = @$r; $s =~ s/\b\Q$o\E\b/$n/g }
    for my $r (@quoted) { my ($o, $n) = @$r; $s =~ s/"\Q$o\E(?=[":])/"$n/g }
    # Shorthand in prose: `nb_scope_new`/`push`/`pop`/`destroy`.
    $s =~ s{(`nb_scope_new`(?:/`\w+`)*/`)destroy`}{$1free`}g;
    next if $s eq $orig;
    $s =~ s/\x00KEPT(\d+)\x00/$kept[$1]/g;
    open my $h, '>', $file or die "$file: $!";
    print $h $s;
    close $h;
    print "renamed in $file\n";
}

# Bare mentions of the five reused names where the old API was already gone: they may be new
# text about the old function (the module type is meant otherwise); list them for a look.
for my $r (grep { !$_->[2] } @swapped) {
    my $old = $r->[0];
    for my $f (grep { /\.md$/ } @ARGV) {
        my $n = 0;
        (my $text = slurp($f)) =~
            s{<!-- rename_api: keep\b.*?<!-- /rename_api -->}{"\n" x (() = $& =~ /\n/g)}gse;
        for my $line (split /\n/, $text) {
            $n++;
            print "review: $f:$n: `$old` may mean the old function $r->[1]\n"
                if $line =~ /`\Q$old\E`/;
        }
    }
}
PERL

perl "$perl_prog" "${files[@]}"

# Reflow the changed C lines (renames change line lengths).
if command -v clang-format-diff-14 >/dev/null; then
    git diff -U0 --no-color -- '*.c' '*.h' | clang-format-diff-14 -p1 -i
else
    echo "rename_api.sh: clang-format-diff-14 missing: changed lines are not reformatted" >&2
fi
