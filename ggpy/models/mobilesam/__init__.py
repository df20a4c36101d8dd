"""MobileSAM on ggpy: the model (image encoder, prompt encoder, mask decoder), its GGUF conversion, the predictor, the
automatic mask generator, batch jobs (jobs/) and the `ggpy-sam` command line (cli.py). Needs the `sam` extra."""
