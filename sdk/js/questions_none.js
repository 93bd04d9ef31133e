// No `questions` import: plain Node (unit tests script answers with
// `testing.answerQuestions`) or a component built without `questions: true`.
export const askImport = null;
