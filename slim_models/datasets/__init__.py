"""Datasets for training jobs: synthetic images and TF-Slim TFRecord folders."""
