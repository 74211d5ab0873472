"""The 16 paraphrases of paraphrase_check_4k.py: (target message, question)."""
Q = [
 ("Warrior Cat, I bed those shoes would be honored", "Who told me my online nickname was a tribute to some footwear?"),
 ("I don't have a particular favorite. But I enjoy math and spanish", "Who said they have no top pick among subjects but like numbers and languages?"),
 ("Haha the detail part is fun:) I'm guessing you like to draw eyes?", "Someone guessed that I enjoy sketching pupils and lashes"),
 ("It has to be super covert, or even better super nonchalant", "Planning a secret surprise so she wouldn't catch on"),
 ("Niice most of my family lives in Utah. I live in Florida!", "Who mentioned relatives out west in the Salt Lake state while staying in the sunshine state?"),
 ("I would never count robots or computers as living.", "Conversation about whether machines deserve rights or count as alive"),
 ("I used to read a lot about Greek and Roman mythology when I was a kid.", "Who was into ancient myths of Athens and Rome as a child?"),
 ("All of the actors are really fun to watch in late night interviews", "The cast is entertaining on talk shows after dark"),
 ("It is mind boggling to think of what is next to come, because it will keep progressing", "Amazing to imagine what the future holds as technology keeps advancing"),
 ("When you ride the shuttle inside the park sit on the left side", "Tip about which seat to take on the theme park tram up and down"),
 ("yeah then instead of visiting germany we could visit really cool planets", "Instead of a trip to Europe we could explore other worlds by rocket"),
 ("and on top of that, there's socializing and experiences vs getting a good education", "Weighing parties and life experience against schooling"),
 ("I think the transitions smooth themselves out the more you invite change", "Welcoming new things makes shifts feel less rough"),
 ("Haha yep. That is so true. I have a sketchbook full of hands", "Filling a whole drawing pad with fingers because they're tough to get right"),
 ("yeah if you can go back in time or ffw that would win most of the time", "Debate over superpowers: time travel versus predicting what's ahead"),
 ("I would have agree with the plea for happier dreams, Warrior Cat.", "Agreeing with the wish for nicer nighttime visions"),
]
