"""How sure a number is: the shared thresholds (thresholds: stated as fact from CONFIDENT; the link fills from
FILLS_LINK), captures that missed the job (coverage), and what leaves a conclusion unsure and what would make it
sure (doubt). Every room that infers imports its lines from here, so they are drawn once."""
