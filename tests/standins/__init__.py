"""Local stand-ins for the Google Cloud APIs tpuctl uses, so tests run the real clients against them."""
