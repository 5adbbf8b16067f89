"""The special tokens every vocabulary starts with, and their ids (no dependencies).

[PAD] is id 0: padding in every batch, masked in every attention. Translation
targets run [BOS] ... [EOS]; BERT's pairs run [CLS] A [SEP] B [SEP], with [MASK]
over the words the masked LM predicts; [UNK] stands for what the vocabulary lacks.

>>> SPECIAL_TOKENS[PAD_ID], SPECIAL_TOKENS[MASK_ID]
('[PAD]', '[MASK]')
"""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
