"""vlm-serve: a multimodal vision-language-model serving appliance on PaddlePaddle."""

__version__ = "0.1.0"
