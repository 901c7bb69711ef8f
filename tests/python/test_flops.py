"""ts.count_flops: exact counts on hand-computed cases, published figures of torchvision models,
and a GPT-style model against PaLM's 6N + 12 L H Q T (conventions: python/trainscope/flops.py,
docs/perf.md)."""

import math

import pytest

torch = pytest.importorskip("torch")

import trainscope as ts  # noqa: E402
from trainscope.flops import transformer_flops_per_token  # noqa: E402


def count(model, *inputs):
    return ts.count_flops(model, inputs)


# --- exact, by hand ------------------------------------------------------------------------

def test_linear_counts_in_by_out_per_row_and_the_bias_add():
    flops = count(torch.nn.Linear(10, 20), torch.randn(4, 10))
    assert flops.total_macs == 4 * 10 * 20
    assert flops.elementwise_flops == 4 * 20  # the bias add
    assert flops.total_flops == 2 * 800 + 80
    assert flops.training_flops == 3 * 1600 + 2 * 80
    assert flops.modules[0]["params"] == 10 * 20 + 20


def test_linear_on_a_sequence_and_without_bias():
    flops = count(torch.nn.Linear(10, 20, bias=False), torch.randn(2, 5, 10))
    assert (flops.total_macs, flops.total_flops) == (2 * 5 * 10 * 20, 2 * 2 * 5 * 10 * 20)


def test_conv2d_with_stride_padding_dilation():
    conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, dilation=2)
    flops = count(conv, torch.randn(2, 3, 16, 16))
    out_side = (16 + 2 * 1 - 2 * (3 - 1) - 1) // 2 + 1  # 7
    outputs = 2 * 8 * out_side * out_side
    assert flops.total_macs == outputs * 3 * 3 * 3
    assert flops.elementwise_flops == outputs


def test_grouped_and_depthwise_conv():
    grouped = count(torch.nn.Conv2d(8, 16, 3, groups=4, bias=False), torch.randn(1, 8, 10, 10))
    assert grouped.total_macs == 16 * 8 * 8 * (8 // 4) * 9
    depthwise = count(torch.nn.Conv2d(8, 8, 3, groups=8, padding=1, bias=False), torch.randn(1, 8, 10, 10))
    assert depthwise.total_macs == 8 * 10 * 10 * 1 * 9


def test_conv1d_and_conv3d():
    assert count(torch.nn.Conv1d(4, 6, 5, bias=False), torch.randn(3, 4, 20)).total_macs == 3 * 6 * 16 * 4 * 5
    assert count(torch.nn.Conv3d(2, 4, 3, bias=False), torch.randn(1, 2, 6, 6, 6)).total_macs == 4 * 4 ** 3 * 2 * 27


def test_conv_transpose_counts_each_input_element_against_its_kernel():
    plain = count(torch.nn.ConvTranspose2d(4, 6, 3, stride=2, bias=False), torch.randn(1, 4, 5, 5))
    assert plain.total_macs == 4 * 5 * 5 * 6 * 9
    grouped = count(torch.nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False), torch.randn(1, 4, 5, 5))
    assert grouped.total_macs == 4 * 5 * 5 * (6 // 2) * 9


def test_functional_matmul_bmm_einsum_are_counted():
    class Products(torch.nn.Module):
        def forward(self, a, b):
            return (a @ b).sum() + torch.bmm(a, b).sum() + torch.einsum("bik,bkj->bij", a, b).sum()

    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    flops = count(Products(), a, b)
    assert flops.total_macs == 3 * (3 * 4 * 5 * 6)


def test_multi_head_attention_projections_scores_and_weighted_sum():
    embed, heads, batch, length = 16, 4, 2, 10
    attention = torch.nn.MultiheadAttention(embed, heads, batch_first=True)
    x = torch.randn(batch, length, embed)
    flops = count(attention, x, x, x)
    projections = 3 * batch * length * embed * embed
    scores_and_sum = 2 * batch * heads * length * length * (embed // heads)
    out_projection = batch * length * embed * embed
    assert flops.total_macs == projections + scores_and_sum + out_projection


def test_explicit_attention_and_scaled_dot_product_agree():
    q = torch.randn(2, 4, 16, 8)
    k = torch.randn(2, 4, 32, 8)
    v = torch.randn(2, 4, 32, 8)
    expected = 2 * 4 * 16 * 32 * 8 * 2  # scores (L x S x E) + weighted sum (L x S x Ev)

    class Explicit(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

    assert count(Explicit(), q, k, v).total_macs == expected
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        pytest.skip(f"torch {torch.__version__} has no F.scaled_dot_product_attention (torch >= 2.0)")

    class Fused(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    assert count(Fused(), q, k, v).total_macs == expected


def test_elementwise_costs():
    # eval batch norm folds into one multiply-add per element; layer norm computes its
    # statistics, normalises and applies its affine: 6 per element; softmax 5; ReLU 1.
    x = torch.randn(4, 3, 5, 5)
    assert count(torch.nn.BatchNorm2d(3).eval(), x).elementwise_flops == 2 * x.numel()
    assert count(torch.nn.BatchNorm2d(3).train(), x).elementwise_flops == 6 * x.numel() + 1  # num_batches_tracked += 1
    assert count(torch.nn.LayerNorm(5), x).elementwise_flops == 6 * x.numel()
    assert count(torch.nn.Softmax(dim=-1), x).elementwise_flops == 5 * x.numel()
    assert count(torch.nn.ReLU(), x).elementwise_flops == x.numel()
    assert count(torch.nn.MaxPool2d(2), torch.randn(1, 2, 8, 8)).elementwise_flops == 2 * 4 * 4 * 4
    assert count(torch.nn.Embedding(100, 8), torch.tensor([[1, 2, 3]])).total_flops == 0


def test_modules_include_their_children_and_the_table_names_them():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    flops = count(model, torch.randn(5, 8))
    by_name = {m["name"]: m for m in flops.modules}
    assert set(by_name) == {"", "0", "1", "2"}
    assert by_name["0"]["macs"] == 5 * 8 * 16 and by_name["2"]["macs"] == 5 * 16 * 4
    assert by_name["1"]["flops"] == 5 * 16 and by_name["1"]["macs"] == 0
    assert by_name[""]["flops"] == sum(by_name[n]["flops"] for n in "012") == flops.total_flops
    assert by_name["0"]["type"] == "Linear" and by_name["0"]["params"] == 8 * 16 + 16
    for entry in flops.modules:
        assert set(entry) >= {"name", "type", "flops", "macs", "params"}
    text = str(flops)
    assert "Sequential" in text and "Linear" in text and "ReLU" in text
    assert "960 MACs" in text.splitlines()[-1]  # 640 + 320
    assert flops.module("2")["calls"] == 1


def test_a_module_called_twice_counts_twice():
    shared = torch.nn.Linear(4, 4, bias=False)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = shared

        def forward(self, x):
            return self.shared(self.shared(x))

    flops = count(Twice(), torch.randn(3, 4))
    assert flops.module("shared")["calls"] == 2
    assert flops.total_macs == 2 * 3 * 4 * 4


def test_bad_model_is_refused_clearly():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ts.count_flops(lambda x: x, (torch.randn(2),))


def test_hooks_are_removed_and_the_model_is_unchanged():
    model = torch.nn.Linear(3, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count(model, torch.randn(2, 3))
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# --- a GPT-style model against PaLM's formula ----------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        attention = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=512, context=64, dim=64, heads=4, layers=3):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, dim)
        self.positions = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def test_gpt_counted_flops_per_token_against_palm_formula():
    vocab, context, dim, heads, layers, batch = 512, 64, 64, 4, 3, 2
    model = TinyGPT(vocab, context, dim, heads, layers)
    flops = ts.count_flops(model, torch.randint(0, vocab, (batch, context)))
    tokens = batch * context
    n_params = sum(p.numel() for p in model.parameters())  # the tied matrix once
    formula = transformer_flops_per_token(n_params, layers, heads, dim // heads, context)

    # Exactly: the matrix products are 6 x (every weight matrix a token meets, the tied head
    # included) + 12 L H Q T; what the formula adds on top of that are parameters a token
    # meets without a multiply-add (position embeddings, biases, norm scales).
    matrix_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    counted_matrix = 3 * 2 * flops.total_macs / tokens
    assert counted_matrix == 6 * matrix_params + 12 * layers * heads * (dim // heads) * context
    no_mac_params = n_params - matrix_params
    assert no_mac_params == model.positions.weight.numel() + sum(
        p.numel() for n, p in model.named_parameters() if n.endswith("bias") or ".ln" in n or n.startswith("ln"))
    assert formula - counted_matrix == 6 * no_mac_params
    # And the elementwise work (norms, softmax, GELU, adds, biases) is what the count adds
    # beyond the formula's matrix products: a few per cent for this small model.
    counted = flops.training_flops / tokens
    assert counted == counted_matrix + 2 * flops.elementwise_flops / tokens
    assert 0.9 < counted / formula < 1.2


# --- published figures of torchvision models -----------------------------------------------

# (model, MACs at 224 x 224 in the matrix-only convention: torchvision's model docs and
# fvcore; MACs plus elementwise FLOPs, the convention of ptflops' "GMac" column)
PUBLISHED = [("resnet18", 1.81e9, 1.82e9), ("resnet50", 4.09e9, 4.12e9), ("vgg16", 15.5e9, 15.5e9),
             ("mobilenet_v2", 0.30e9, 0.32e9)]


@pytest.mark.parametrize("name,matrix_macs,with_elementwise", PUBLISHED)
def test_torchvision_models_against_published_figures(name, matrix_macs, with_elementwise):
    torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed in this environment "
                                                             "(the torch-2 venv has none); Debian's python3-torchvision has it")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    flops = ts.count_flops(model, torch.randn(1, 3, 224, 224))
    assert flops.uncounted == {}
    assert abs(flops.total_macs / matrix_macs - 1) < 0.02, flops.total_macs
    assert abs((flops.total_macs + flops.elementwise_flops) / with_elementwise - 1) < 0.02
    assert flops.total_flops == 2 * flops.total_macs + flops.elementwise_flops
    assert flops.modules[0]["params"] == sum(p.numel() for p in model.parameters())
