from ckheur.cli import console

console()
