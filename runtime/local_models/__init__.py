"""Local models: the shipped catalog, downloads from the Hugging Face Hub, the data folder's installed models,
and what this computer can run. No llama.cpp here (providers/ runs the models); the facade's model methods
(services/local_models.py) put these together."""
