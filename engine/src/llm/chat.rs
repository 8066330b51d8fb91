//! Chat templates: the model's Jinja template (`chat_template.jinja`, as Hugging Face's
//! `apply_chat_template` renders it) with minijinja. Hugging Face renders with `trim_blocks`
//! and `lstrip_blocks` on, Python's string methods available (`pycompat`), and
//! `raise_exception`; the same here, so the prompt text is the one transformers would make.

use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos: Option<String>,
    eos: Option<String>,
}

fn raise_exception(msg: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        msg,
    ))
}

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the token strings the template may use.
    pub fn new(
        source: &str,
        bos: Option<String>,
        eos: Option<String>,
    ) -> Result<ChatTemplate, String> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| format!("the chat template does not compile: {e}"))?;
        Ok(ChatTemplate { env, bos, eos })
    }

    /// The prompt text of `messages`, ending with the assistant's turn opened when
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| format!("chat template: {e}"))?;
        t.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.clone().unwrap_or_default(),
            eos_token => self.eos.clone().unwrap_or_default(),
        })
        .map_err(|e| format!("the chat template fails on these messages: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's template (from its GGUF file).
    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_as_transformers_does() {
        let t = ChatTemplate::new(SMOL, None, None).unwrap();
        let s = t.render(&[Message::new("user", "Hi")], true).unwrap();
        // transformers' apply_chat_template(..., tokenize=False, add_generation_prompt=True)
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_and_raise_exception_work() {
        let src = "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}{{ messages[0].content.strip() }}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(
            t.render(&[Message::new("user", "  x ")], false).unwrap(),
            "x"
        );
        let e = t.render(&[Message::new("system", "x")], false).unwrap_err();
        assert!(e.contains("user first"), "{e}");
        assert!(ChatTemplate::new("{% if %}", None, None).is_err());
    }
}
