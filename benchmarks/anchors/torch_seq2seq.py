"""Our RNN Seq2Seq's training against PyTorch's: Bahdanau attention,
preset small, as the job trains it.

    python -m benchmarks.anchors.torch_seq2seq --check  # the same function: first steps' losses
    python -m benchmarks.anchors.torch_seq2seq --time [--rounds 3 --steps 30 --threads 2]
    python -m benchmarks.anchors.torch_seq2seq --profile [--precision bfloat16] [--compile]

Benchmark-only requirement: `torch` (CPU wheel). Everything but the model is `torch_transformer`'s:
the batches, loss, optimizer, learning rates, timing and table (see its docstring and `harness`'s).

The model is our `Seq2SeqBackbone` with `attention="bahdanau"` at preset "small" (2 × 256 LSTM,
unidirectional), with what each framework gives for an LSTM: the encoder is one `nn.LSTM` over the
packed sequences (padding neither read nor output, the final states those of each source's last
token, as our masked loop); the decoder loops over the target with one `nn.LSTMCell` a layer, since
Bahdanau's context c_t, which each step's input holds, is scored from the state before it:

    c_t = Σ_j α_tj h_j,  α_t = softmax_j(vᵀ tanh(W_q s_{t-1} + b + W_k h_j))   (section 3.1, app. A)
    s_t = LSTM([E y_{t-1}; c_t], s_{t-1}),  o_t = tanh(W_o [s_t; c_t; E y_{t-1}])
    logits = Eᵀ o_t + b_y                                               (E: the target table, tied)

dropout on both embeddings, between the LSTM layers and on o_t, as ours. Keras's LSTM has one bias a
gate where PyTorch's has two that add up; the second stays 0 and frozen, so both train the same
function. `--compile` compiles one decoder step (attention and cells; a compiled time loop would
unroll once per target length).
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.anchors import harness, torch_transformer


class Seq2Seq(nn.Module):
    """Our `Seq2SeqBackbone` (LSTM, Bahdanau attention, tied target
    embedding): ids in, logits out.
    """

    family = "seq2seq"  # the job's model it copies (`harness`)

    def __init__(self, vocabulary_size, num_layers, hidden_dim, attention_units, dropout):
        super().__init__()
        self.source_embedding = nn.Embedding(vocabulary_size, hidden_dim)
        self.encoder = nn.LSTM(
            hidden_dim, hidden_dim, num_layers, batch_first=True, dropout=dropout
        )
        self.target_embedding = nn.Embedding(vocabulary_size, hidden_dim)
        self.step = DecoderStep(num_layers, hidden_dim, attention_units, dropout)
        self.readout = nn.Linear(3 * hidden_dim, hidden_dim)  # W_o [s_t; c_t; E y_{t-1}]
        self.output_bias = nn.Parameter(torch.zeros(vocabulary_size))
        self.dropout = nn.Dropout(dropout)
        for name, bias in self.named_parameters():
            if "bias_hh" in name:
                nn.init.zeros_(bias).requires_grad_(False)

    @classmethod
    def of(cls, spec, dropout=None):
        """The model `harness.write` described (`spec`); `dropout` overrides its rate."""
        backbone = spec["backbone"]
        assert (
            backbone["cell"] == "lstm"
            and backbone["attention"] == "bahdanau"
            and backbone["tie_output"]
        )
        assert not backbone["bidirectional"] and not backbone["scheduled_sampling"]
        assert backbone["source_vocabulary_size"] == backbone["target_vocabulary_size"]
        assert backbone["embedding_dim"] in (None, backbone["hidden_dim"])
        return cls(
            backbone["source_vocabulary_size"],
            backbone["num_layers"],
            backbone["hidden_dim"],
            backbone["attention_units"] or backbone["hidden_dim"],
            backbone["dropout"] if dropout is None else dropout,
        )

    def forward(self, source, target_in):
        source_mask = source != harness.PAD_ID
        packed = nn.utils.rnn.pack_padded_sequence(
            self.dropout(self.source_embedding(source)),
            source_mask.sum(1),
            batch_first=True,
            enforce_sorted=False,
        )
        memory, (h, c) = self.encoder(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(
            memory, batch_first=True, total_length=source.shape[1]
        )
        keys = self.step.key(memory)  # W_k h_j, once a source
        # the decoder starts from the encoder's final states, layer by layer
        state = list(zip(h, c))
        embedded = self.dropout(self.target_embedding(target_in))
        features = []
        for t in range(target_in.shape[1]):
            state, feature = self.step(embedded[:, t], state, memory, keys, source_mask)
            features.append(feature)
        output = self.dropout(torch.tanh(self.readout(torch.stack(features, dim=1))))
        return F.linear(output, self.target_embedding.weight, self.output_bias)

    def compile_training(self, loss):
        """`torch.compile` of what it compiles for training: the decoder step."""
        self.step.compile()
        return loss

    def load_keras_weights(self, backbone):
        """Copies our `Seq2SeqBackbone`'s weights (a Keras kernel is
        (in, out), torch's (out, in)).
        """

        def put(parameter, value, transpose=False):
            value = torch.from_numpy(np.asarray(value, dtype=np.float32))
            with torch.no_grad():
                parameter.copy_(value.T if transpose else value)

        def lstm(weight_ih, weight_hh, bias_ih, cell):  # the same gate order: i, f, g, o
            put(weight_ih, cell.kernel, transpose=True)
            put(weight_hh, cell.recurrent_kernel, transpose=True)
            put(bias_ih, cell.bias)

        encoder, decoder = backbone.encoder, backbone.decoder
        put(self.source_embedding.weight, encoder.embedding.embeddings)
        for i, layer in enumerate(encoder.rnn_layers):
            lstm(
                *(
                    getattr(self.encoder, f"{name}_l{i}")
                    for name in ("weight_ih", "weight_hh", "bias_ih")
                ),
                layer.cell,
            )
        put(self.target_embedding.weight, decoder.embedding.embeddings)
        for cell, ours in zip(self.step.cells, decoder.cells):
            lstm(cell.weight_ih, cell.weight_hh, cell.bias_ih, ours)
        attention = decoder.attention_layer
        put(self.step.query.weight, attention.query_projection.kernel, transpose=True)
        put(self.step.query.bias, attention.query_projection.bias)
        put(self.step.key.weight, attention.key_projection.kernel, transpose=True)
        put(self.step.v, attention.v)
        put(self.readout.weight, decoder.output_layer.kernel, transpose=True)
        put(self.readout.bias, decoder.output_layer.bias)
        put(self.output_bias, decoder.output_bias)


class DecoderStep(nn.Module):
    """One decoder step: Bahdanau's context from s_{t-1}, then the
    LSTM layers on [E y_{t-1}; c_t].
    """

    def __init__(self, num_layers, hidden_dim, attention_units, dropout):
        super().__init__()
        self.query = nn.Linear(hidden_dim, attention_units)  # W_q s + b
        self.key = nn.Linear(hidden_dim, attention_units, bias=False)  # W_k h
        self.v = nn.Parameter(torch.empty(attention_units))
        nn.init.uniform_(self.v, -((3 / attention_units) ** 0.5), (3 / attention_units) ** 0.5)
        self.cells = nn.ModuleList(
            nn.LSTMCell(2 * hidden_dim if i == 0 else hidden_dim, hidden_dim)
            for i in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, embedded, state, memory, keys, source_mask):
        scores = torch.tanh(self.query(state[-1][0])[:, None] + keys) @ self.v  # (B, S)
        weights = scores.masked_fill(~source_mask, float("-inf")).softmax(dim=-1)
        context = torch.bmm(weights[:, None], memory)[:, 0]
        x, new_state = torch.cat([embedded, context], dim=-1), []
        for i, cell in enumerate(self.cells):
            h, c = cell(self.dropout(x) if i else x, state[i])
            new_state.append((h, c))
            x = h
        return new_state, torch.cat([x, context, embedded], dim=-1)


if __name__ == "__main__":
    torch_transformer.main(Seq2Seq, __doc__)
