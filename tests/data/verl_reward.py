"""A reward file written for verl, unchanged: GSM8K-style answer after '####', else the last number."""

import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    match = re.search(r"####\s*(-?[0-9.,]+)", solution_str)
    numbers = re.findall(r"-?[0-9]+", solution_str)
    answer = match.group(1).replace(",", "") if match else (numbers[-1] if numbers else None)
    return {"score": float(answer == ground_truth), "has_answer": float(answer is not None)}
